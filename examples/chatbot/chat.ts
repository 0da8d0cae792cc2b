/**
 * The chat program: an agent over standard input and output.
 *
 * Each line of standard input is a user message of `--session`; `/status`, `/restart <lane>` and
 * `/quit` are commands. At the end of input every turn owed is answered and delivered, then the
 * program exits 0; on SIGTERM / SIGINT it stops reading, drains and exits 0 (a second signal exits
 * at once). Replies are printed (or appended to `--outbox`) when the delivery queue delivers them.
 */
import { Effect, Layer, Redacted } from "effect"
import type { Scope } from "effect"
import * as readline from "node:readline"
import {
  Agent,
  AnthropicModel,
  FileChannel,
  ScriptedModel,
  replyOf,
  runMain,
  serve
} from "../../src/agent/index.js"
import type { Channel, MainContext, Model } from "../../src/agent/index.js"
import type { DeliveryEntry, DeliveryFailure } from "../../src/delivery/index.js"
import type { ChatOptions } from "./cli.js"
import { makeOutput } from "./output.js"
import type { Output } from "./output.js"

/** Which model to use, and the banner that says so. */
const chooseModel = (options: ChatOptions): { readonly layer: Layer.Layer<Model>; readonly banner: string } => {
  const key = process.env.ANTHROPIC_API_KEY
  if (key !== undefined && key !== "" && !options.offline) {
    return {
      layer: AnthropicModel.layer({
        apiKey: Redacted.make(key),
        ...(options.model === undefined ? {} : { model: options.model })
      }),
      banner: `switchyard chat: talking to Claude (${options.model ?? AnthropicModel.DEFAULT_MODEL}). Type a message, /status, /restart <lane> or /quit.`
    }
  }
  const why = options.offline ? "--offline" : "no ANTHROPIC_API_KEY"
  return {
    layer: ScriptedModel.layer({ latencyMs: options.latency }),
    banner: `switchyard chat: offline (${why}) — replies come from the scripted model, no network.\n` +
      `To talk to Claude: ANTHROPIC_API_KEY=sk-... npm run chat (ANTHROPIC_BASE_URL and --model are honoured).\n` +
      `Type a message, /status, /restart <lane> or /quit.`
  }
}

/** The channel: prints replies (or appends them to the outbox) and prints cron events. */
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
    const send = (entry: DeliveryEntry): Effect.Effect<void, DeliveryFailure> =>
      Effect.gen(function*() {
        const reply = replyOf(entry)
        if (outbox !== undefined) yield* outbox.send(entry)
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
        output.event({ type: "reply", session: reply.session, id: entry.id, text: reply.text, messages: reply.messages })
        if (!output.wasStreamed(reply)) {
          output.say(reply.kind === "heartbeat" ? `[heartbeat] ${reply.text}` : `bot> ${reply.text}`)
        }
      })
    // The name stays "console" with or without an outbox, so entries left in the log are delivered
    // by the next start whichever way it prints.
    return { name: "console", send } satisfies Channel
  })

const handleLine = (agent: Agent.Agent, options: ChatOptions, output: Output, line: string): Effect.Effect<"quit" | void> =>
  Effect.gen(function*() {
    const text = line.trim()
    if (text === "") return
    if (text === "/quit") return "quit" as const
    if (text === "/status") {
      const snapshot = yield* agent.snapshot
      output.event({ type: "status", lanes: snapshot.lanes, deliveries: snapshot.deliveries })
      for (const lane of snapshot.lanes) {
        output.say(
          `lane ${lane.lane}: running ${lane.running}, waiting ${lane.waiting}, keys ${lane.keys}, generation ${lane.generation}${lane.draining ? ", draining" : ""}`
        )
      }
      const d = snapshot.deliveries
      output.say(`deliveries: pending ${d.pending}, dead ${d.dead}, in flight ${d.inFlight}, delivered ${d.delivered}`)
      return
    }
    if (text === "/restart" || text.startsWith("/restart ")) {
      const lane = text.slice("/restart".length).trim()
      if (lane === "") {
        output.error("error: /restart needs a lane, e.g. /restart main")
        return
      }
      yield* agent.restartLane(lane).pipe(
        Effect.match({
          onFailure: (error) => output.error(`error: ${error.message}`),
          onSuccess: (generation) => {
            output.event({ type: "restart", lane, generation })
            output.say(`lane ${lane} restarted (generation ${generation})`)
          }
        })
      )
      return
    }
    if (text.startsWith("/")) {
      output.error(`error: unknown command ${text.split(/\s/)[0]} (try /status, /restart <lane>, /quit)`)
      return
    }
    yield* sendMessages(agent, options, output, [line])
  })

/** A line that is a user message (not empty, not a command). */
const isMessage = (line: string): boolean => {
  const text = line.trim()
  return text !== "" && !text.startsWith("/")
}

/** Sends user messages that arrived together: one write accepts them all. */
const sendMessages = (agent: Agent.Agent, options: ChatOptions, output: Output, lines: ReadonlyArray<string>) =>
  agent.sendAll(options.session, lines).pipe(
    Effect.matchEffect({
      onFailure: (error) => Effect.sync(() => output.error(`error: ${lines.length} message(s) not taken: ${error.message}`)),
      onSuccess: () => Effect.void
    })
  )

/**
 * Reads standard input line by line until it ends (or `/quit`), in order. User messages that are
 * already buffered together go to `handleMessages` at once; every other line to `handle`.
 */
const readInput = (
  handle: (line: string) => Effect.Effect<"quit" | void>,
  handleMessages: (lines: ReadonlyArray<string>) => Effect.Effect<void>
): Effect.Effect<void> =>
  Effect.gen(function*() {
    const lines: Array<string | null> = []
    let wake: (() => void) | undefined
    const push = (line: string | null) => {
      lines.push(line)
      const w = wake
      wake = undefined
      w?.()
    }
    const rl = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const rl = readline.createInterface({ input: process.stdin, terminal: process.stdin.isTTY === true, crlfDelay: Infinity })
        rl.on("line", (line) => push(line))
        rl.on("close", () => push(null))
        // In a terminal, readline takes Ctrl+C itself: pass it on as the signal it means.
        rl.on("SIGINT", () => process.kill(process.pid, "SIGINT"))
        return rl
      }),
      (rl) => Effect.sync(() => {
        rl.close()
        process.stdin.destroy()
      })
    )
    void rl
    let next = 0
    while (true) {
      if (next === lines.length) {
        lines.length = 0 // everything read was handled: keep no memory of it
        next = 0
        yield* Effect.callback<void>((resume) => {
          if (next < lines.length) resume(Effect.void)
          else wake = () => resume(Effect.void)
        })
        continue
      }
      const line = lines[next]!
      if (line === null) return
      if (isMessage(line)) {
        const run: Array<string> = []
        while (next < lines.length && lines[next] !== null && isMessage(lines[next]!)) {
          run.push(lines[next]!)
          lines[next++] = ""
        }
        // Handled whole, even when a signal stops the input meanwhile.
        yield* Effect.uninterruptible(handleMessages(run))
        continue
      }
      lines[next++] = ""
      if ((yield* Effect.uninterruptible(handle(line))) === "quit") return
    }
  }).pipe(Effect.scoped)

/** Runs the chat program as the process's main. */
export const runChat = (options: ChatOptions): void => {
  // A reader that went away (`| head`) is not a crash: what is not printed stays delivered all the same.
  process.stdout.on("error", () => {})
  process.stderr.on("error", () => {})
  const tty = process.stdout.isTTY === true
  const output = makeOutput({ json: options.json, tty, session: options.session })
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
        ...(options.heartbeat === undefined ? {} : { heartbeat: { everyMs: options.heartbeat } }),
        cron: options.cron,
        onEvent: (event) => {
          output.onAgentEvent(event)
          if (event.type === "heartbeat") output.event({ type: "heartbeat", suppressed: event.suppressed })
          else if (event.type === "turn-failed") output.error(`error: ${event.kind} turn of ${event.session} failed: ${event.error}`)
          else if (event.type === "recovered") {
            output.note(`recovered ${event.session}: ${event.messages} message(s) to answer, ${event.replies} reply(ies) to log`)
          }
        }
      }).pipe(Effect.provide(model.layer))
      output.event({ type: "ready" })
      const { reason, report } = yield* serve({
        agent,
        main,
        input: readInput(
          (line) => handleLine(agent, options, output, line),
          (lines) => sendMessages(agent, options, output, lines)
        ),
        onStop: (reason) => {
          // On standard error in every mode: a supervisor (or a test) sees that the drain began.
          if (reason !== "eof") {
            process.stderr.write(`switchyard chat: ${reason}: finishing the turns in flight (a second signal exits at once)\n`)
          }
        }
      })
      output.event({
        type: "shutdown",
        signal: reason,
        drain: { completed: report.drain.completed, canceled: report.drain.canceled, timedOut: report.drain.timedOut },
        pendingDeliveries: report.pendingDeliveries
      })
      output.note(
        `bye (${reason}): the drain let ${report.drain.completed} turn(s) finish and canceled ${report.drain.canceled}` +
          `${report.drain.timedOut ? " (drain timed out)" : ""}; ${report.pendingDeliveries} delivery(ies) left for the next start`
      )
      return 0
    }).pipe(
      Effect.scoped,
      Effect.catch((error: { readonly message?: string; readonly _tag?: string }) =>
        Effect.sync(() => {
          output.error(`error: ${error.message ?? String(error)}`)
          return 1
        })
      )
    )
  )
}
