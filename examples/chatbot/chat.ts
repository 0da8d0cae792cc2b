/**
 * The chat program: an agent over standard input and output.
 *
 * Each line of standard input is a user message of `--session`; `/help`, `/status`, `/retry`,
 * the lane commands (`/restart`, `/pause`, `/resume`, `/limits`) and `/quit` are commands (commands.ts). In a terminal: a `you> ` prompt, the
 * thinking sign, the reply streaming (screen.ts). At the end of input every turn owed is answered and delivered, then the
 * program exits 0; on SIGTERM / SIGINT it stops reading, drains and exits 0 (a second signal exits
 * at once). Replies are printed (or appended to `--outbox`) when the delivery queue delivers them.
 */
import { Effect, Redacted } from "effect"
import type { Layer, Scope } from "effect"
import {
  Agent,
  AnthropicModel,
  FileChannel,
  replyOf,
  runMain,
  ScriptedModel,
  serve,
  WebhookChannel
} from "../../src/agent/index.js"
import type { AgentEvent, Channel, MainContext, Model } from "../../src/agent/index.js"
import { DeliveryFailure } from "../../src/delivery/index.js"
import type { DeliveryEntry } from "../../src/delivery/index.js"
import type { ChatOptions } from "./cli.js"
import { runCommand } from "./commands.js"
import { readInput } from "./input.js"
import { makeLogs } from "./logs.js"
import type { Logs } from "./logs.js"
import { makeOutput } from "./output.js"
import type { Output } from "./output.js"
import { makeScreen } from "./screen.js"

/** Which model to use, and the banner that says so. */
const chooseModel = (options: ChatOptions): { readonly layer: Layer.Layer<Model>; readonly banner: string } => {
  const key = process.env.ANTHROPIC_API_KEY
  if (key !== undefined && key !== "" && !options.offline) {
    return {
      layer: AnthropicModel.layer({
        apiKey: Redacted.make(key),
        ...(options.model === undefined ? {} : { model: options.model })
      }),
      banner: `switchyard chat: talking to Claude (${
        options.model ?? AnthropicModel.DEFAULT_MODEL
      }). Type a message, or /help.`
    }
  }
  const why = options.offline ? "--offline" : "no ANTHROPIC_API_KEY"
  return {
    layer: ScriptedModel.layer({ latencyMs: options.latency }),
    banner: `switchyard chat: offline (${why}) — replies come from the scripted model, no network.\n` +
      `To talk to Claude: ANTHROPIC_API_KEY=sk-... npm run chat (ANTHROPIC_BASE_URL and --model are honoured).\n` +
      `Type a message, or /help.`
  }
}

/**
 * The channel: prints replies (or appends them to the outbox) and prints cron events. With
 * `--webhook` every entry is POSTed first, and printed as usual once the webhook took it.
 */
const makeChannel = (
  options: ChatOptions,
  output: Output
): Effect.Effect<Channel, DeliveryFailure, Scope.Scope> =>
  Effect.gen(function*() {
    const outbox = options.outbox === undefined ? undefined : yield* FileChannel({
      path: options.outbox,
      name: "outbox",
      format: (entry) => {
        const reply = replyOf(entry)
        return { id: entry.id, session: reply?.session ?? entry.message.to, text: reply?.text ?? entry.message.body }
      }
    })
    const webhook = options.webhook === undefined ? undefined : WebhookChannel({ url: options.webhook })
    const send = (entry: DeliveryEntry): Effect.Effect<void, DeliveryFailure> =>
      Effect.gen(function*() {
        const reply = replyOf(entry)
        if (webhook !== undefined) yield* webhook.send(entry)
        if (outbox !== undefined) yield* outbox.send(entry)
        // Printing is this channel's delivery: to a terminal that hung up it would reach nobody, so the
        // entry stays in the log and the next start prints it.
        if (webhook === undefined && outbox === undefined && output.terminalGone()) {
          return yield* new DeliveryFailure({ message: "the terminal is gone (it hung up): kept for the next start" })
        }
        if (reply === undefined) {
          if (outbox === undefined) output.say(`[${entry.message.to}] ${JSON.stringify(entry.message.body)}`)
          return
        }
        if (reply.kind === "cron") {
          output.event({ type: "cron", job: reply.job ?? reply.session, id: entry.id, text: reply.text })
          if (outbox === undefined) output.say(`[${reply.job ?? reply.session}] ${reply.text}`)
          return
        }
        if (outbox !== undefined) return
        output.event({
          type: "reply",
          session: reply.session,
          id: entry.id,
          text: reply.text,
          messages: reply.messages
        })
        if (!output.wasStreamed(reply)) {
          output.say(reply.kind === "heartbeat" ? `[heartbeat] ${reply.text}` : `bot> ${reply.text}`)
        }
      })
    // The name stays "console" with or without an outbox or a webhook, so entries left in the log are delivered
    // by the next start whichever way it prints.
    return { name: "console", send } satisfies Channel
  })

const handleLine = (
  agent: Agent.Agent,
  options: ChatOptions,
  output: Output,
  logs: Logs,
  line: string
): Effect.Effect<"quit" | void> => {
  const text = line.trim()
  if (text === "") return Effect.void
  if (text.startsWith("/")) return runCommand(agent, output, logs, text)
  return sendMessages(agent, options, output, [line])
}

/** Sends user messages that arrived together: one write accepts them all. */
const sendMessages = (agent: Agent.Agent, options: ChatOptions, output: Output, lines: ReadonlyArray<string>) =>
  agent.sendAll(options.session, lines).pipe(
    Effect.matchEffect({
      onFailure: (error) =>
        Effect.sync(() => output.error(`error: ${lines.length} message(s) not taken: ${error.message}`)),
      onSuccess: () => Effect.void
    })
  )

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`

/** One line for a failed turn: what failed, and what becomes of the messages. */
const failedTurnLine = (event: Extract<AgentEvent, { type: "turn-failed" }>): string => {
  if (event.kind !== "user") return `error: the ${event.kind} turn failed: ${event.error}`
  const what = `error: no reply for ${event.session}: ${event.error}`
  if (!event.kept) return `${what}; given up (it cannot succeed), the session goes on`
  const kept = event.messages === 1
    ? "1 message is kept and will be answered"
    : `${event.messages} messages are kept and will be answered`
  const when = event.retryInMs === undefined
    ? "when you send another message, or /retry"
    : `trying again in ${Math.round(event.retryInMs / 1000)} s (/retry: now)`
  return `${what}; ${kept}: ${when}`
}

/** Prints the agent's events that are not replies: failed turns and deliveries, recoveries. */
const makeEventPrinter = (output: Output) => {
  /** Entries whose failure was printed (once per entry, not once per attempt). */
  const failedDeliveries = new Set<string>()
  /** Per session, the failure last printed (while its turns keep failing). */
  const failing = new Map<string, string>()
  return (event: AgentEvent) => {
    output.onAgentEvent(event)
    if (event.type === "heartbeat") {
      output.event({ type: "heartbeat", suppressed: event.suppressed })
    } else if (event.type === "turn-failed") {
      // The automatic retries fail the same way: one line, until the failure changes (/status counts the attempts).
      if (event.kind === "user" && event.kept && failing.get(event.session) === event.error) return
      if (event.kind === "user") failing.set(event.session, event.error)
      output.error(failedTurnLine(event))
    } else if (event.type === "turn-ended" && event.kind === "user") {
      failing.delete(event.session)
    } else if (event.type === "delivery-failed") {
      if (failedDeliveries.has(event.entry.id)) return
      failedDeliveries.add(event.entry.id)
      output.error(
        `error: the reply ${event.entry.id} to ${event.entry.message.to} was not delivered: ${event.error}; ` +
          "it stays in the delivery log (`npm run chat -- deliveries` shows it)"
      )
    } else if (event.type === "delivered") {
      failedDeliveries.delete(event.entry.id)
    } else if (event.type === "recovered") {
      output.note(
        `recovered ${event.session}: ${event.messages} message(s) to answer, ${event.replies} reply(ies) to log`
      )
    }
  }
}

/** Runs the chat program as the process's main. */
export const runChat = (options: ChatOptions): void => {
  // A reader that went away (`| head`) is not a crash: what is not printed stays delivered all the same.
  process.stdout.on("error", () => {})
  process.stderr.on("error", () => {})
  // A screen when standard output is a terminal; a prompt when standard input is one too.
  const screen = !options.json && process.stdout.isTTY === true ? makeScreen(process.stdout) : undefined
  const prompt = screen !== undefined && process.stdin.isTTY === true ? screen : undefined
  const output = makeOutput({
    json: options.json,
    ...(screen === undefined ? {} : { screen }),
    session: options.session
  })
  const logs = makeLogs(
    options.logLevel ?? (prompt === undefined ? "warn" : "none"),
    (line) => screen === undefined ? void process.stderr.write(line + "\n") : screen.print(line, "err")
  )
  const model = chooseModel(options)
  runMain((main: MainContext) =>
    Effect.gen(function*() {
      output.note(model.banner)
      const channel = yield* makeChannel(options, output)
      const agent = yield* Agent.make({
        stateDir: options.stateDir,
        channel,
        defaultSession: options.session,
        drainTimeoutMs: options.drainTimeout,
        turnTimeoutMs: options.turnTimeout,
        ...(options.heartbeat === undefined ? {} : { heartbeat: { everyMs: options.heartbeat } }),
        cron: options.cron,
        onEvent: makeEventPrinter(output)
      }).pipe(Effect.provide(model.layer))
      output.event({ type: "ready" })
      const { reason, report } = yield* serve({
        agent,
        main,
        input: readInput(
          prompt,
          (line) => handleLine(agent, options, output, logs, line),
          (lines) => sendMessages(agent, options, output, lines)
        ),
        onStop: (reason) => {
          // On standard error in every mode: a supervisor (or a test) sees that the drain began.
          if (reason !== "eof") {
            const line = `switchyard chat: ${reason}: finishing the turns in flight (a second signal exits at once)`
            if (screen === undefined) process.stderr.write(line + "\n")
            else screen.print(line, "err")
          }
        }
      })
      output.event({
        type: "shutdown",
        signal: reason,
        drain: { completed: report.drain.completed, canceled: report.drain.canceled, timedOut: report.drain.timedOut },
        pendingDeliveries: report.pendingDeliveries
      })
      const unanswered = report.unanswered === 0
        ? ""
        : `; ${plural(report.unanswered, "message", "messages")} not answered (kept: the next start answers them)`
      output.note(
        `bye (${reason}): the drain let ${report.drain.completed} turn(s) finish and canceled ${report.drain.canceled}` +
          `${
            report.drain.timedOut ? " (drain timed out)" : ""
          }; ${report.pendingDeliveries} delivery(ies) left for the next start` +
          unanswered
      )
      // End of input with messages not answered: 3, so a script knows (a signal's drain exits 0).
      return reason === "eof" && report.unanswered > 0 ? 3 : 0
    }).pipe(
      Effect.scoped,
      logs.provide,
      Effect.catch((error: { readonly message?: string; readonly _tag?: string }) =>
        Effect.sync(() => {
          output.error(`error: ${error.message ?? error._tag ?? "unknown failure"}`)
          return 1
        })
      )
    )
  )
}
