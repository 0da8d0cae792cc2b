/**
 * switchyard's Telegram bot: `TELEGRAM_BOT_TOKEN=<token> npm run telegram -- [options]`.
 *
 * Each text message a chat sends the bot is `agent.sendAll(<chat id>, texts)` (poller.ts); every
 * reply goes through the agent's delivery log and queue to `sendMessage` (TelegramChannel.ts).
 * Claude answers when ANTHROPIC_API_KEY is set, the scripted model otherwise. SIGTERM / Ctrl+C:
 * stop polling, finish the turns in flight, deliver what can be, exit 0; the rest is delivered by
 * the next start.
 */
import { Command, InvalidArgumentError } from "commander"
import type { Layer } from "effect"
import { Effect, Redacted } from "effect"
import * as path from "node:path"
import { Agent, AnthropicModel, runMain, ScriptedModel, serve } from "../../src/agent/index.js"
import type { AgentEvent, MainContext, Model } from "../../src/agent/index.js"
import { makeBotApi, readApiBase, readToken } from "./botApi.js"
import { loadMigrations } from "./migrations.js"
import { poll } from "./poller.js"
import { TelegramChannel, textOf } from "./TelegramChannel.js"
import { makeTyping } from "./typing.js"

interface BotOptions {
  readonly stateDir: string
  readonly offline: boolean
  readonly model?: string
  readonly latency: number
  readonly pollTimeout: number
  readonly drainTimeout: number
  readonly turnTimeout: number
}

const integer = (flag: string, from: number, to = Number.MAX_SAFE_INTEGER) => (value: string): number => {
  const n = /^\s*\d+\s*$/.test(value) ? Number(value) : Number.NaN
  if (!Number.isSafeInteger(n) || n < from || n > to) {
    throw new InvalidArgumentError(`Expected \`${flag}\` to be an integer from ${from} to ${to}, got \`${value}\``)
  }
  return n
}

const say = (line: string) => void process.stdout.write(line + "\n")
const complain = (line: string) => void process.stderr.write(line + "\n")
const short = (text: string) => (text.length > 80 ? `${text.slice(0, 80)}... (${text.length} characters)` : text)

const chooseModel = (options: BotOptions): { readonly layer: Layer.Layer<Model>; readonly what: string } => {
  const key = process.env.ANTHROPIC_API_KEY
  if (key !== undefined && key !== "" && !options.offline) {
    return {
      layer: AnthropicModel.layer({
        apiKey: Redacted.make(key),
        ...(options.model === undefined ? {} : { model: options.model })
      }),
      what: `Claude (${options.model ?? AnthropicModel.DEFAULT_MODEL})`
    }
  }
  return {
    layer: ScriptedModel.layer({ latencyMs: options.latency }),
    what: "the scripted model (offline; set ANTHROPIC_API_KEY for Claude)"
  }
}

/** Prints deliveries and their failures (a failure once per reply, not once per attempt). */
const makeEventPrinter = (stateDir: string) => {
  const failed = new Set<string>()
  return (event: AgentEvent) => {
    if (event.type === "delivered") {
      failed.delete(event.entry.id)
      say(`→ ${event.entry.message.to}: ${short(textOf(event.entry))}`)
    } else if (event.type === "delivery-failed" && !failed.has(event.entry.id)) {
      failed.add(event.entry.id)
      const blocked = /answered 403\b/.test(event.error)
        ? `; given up: the user blocked the bot (npm run chat -- deliveries --state-dir ${stateDir} lists it)`
        : ""
      complain(
        `error: the reply ${event.entry.id} to ${event.entry.message.to} was not delivered: ${event.error}${blocked}`
      )
    } else if (event.type === "turn-failed") {
      complain(`error: no reply for ${event.kind === "user" ? event.session : event.kind}: ${event.error}`)
    }
  }
}

const run = (options: BotOptions): void => {
  const token = readToken(process.env.TELEGRAM_BOT_TOKEN)
  const base = readApiBase(process.env.TELEGRAM_API_BASE)
  if (typeof token === "string" || typeof base === "object") {
    complain(`error: ${typeof token === "string" ? token : (base as { readonly problem: string }).problem}`)
    process.exitCode = 1
    return
  }
  const api = makeBotApi({ base, token })
  const model = chooseModel(options)
  const stateDir = path.resolve(options.stateDir)
  runMain((main: MainContext) =>
    Effect.gen(function*() {
      const me = yield* api.call<{ readonly username?: string; readonly id: number }>("getMe", {}, 15_000).pipe(
        Effect.mapError((error) =>
          error.status === 401 || error.status === 404
            ? `Telegram refused TELEGRAM_BOT_TOKEN (${error.message}); check it with @BotFather`
            : `cannot reach the Bot API at ${base}: ${error.message}`
        )
      )
      const migrations = yield* loadMigrations(path.join(stateDir, "telegram", "migrated.json"), complain)
      const channel = yield* TelegramChannel({
        api,
        partsFile: path.join(stateDir, "telegram", "parts.json"),
        migrations,
        onMaybeSent: (entry, partsSent) =>
          say(
            `the reply ${entry.id} to ${entry.message.to} may have gone out before the restart` +
              `${
                partsSent > 0 ? ` (${partsSent} part(s) are known sent)` : ""
              }; Telegram cannot be asked, so it is sent again`
          ),
        onMigrated: (from, to) =>
          say(`telegram: chat ${from} was upgraded to a supergroup (${to}); its replies go to ${to} from now on`)
      })
      // "typing…" in a chat while its turn runs (sent to the chat a migrated group became)
      const typing = yield* makeTyping({
        send: (chat) => api.call("sendChatAction", { chat_id: migrations.get(chat) ?? chat, action: "typing" }, 5_000),
        maxMs: options.turnTimeout
      })
      const printEvent = makeEventPrinter(options.stateDir)
      const agent = yield* Agent.make({
        stateDir,
        channel,
        drainTimeoutMs: options.drainTimeout,
        turnTimeoutMs: options.turnTimeout,
        // Telegram asks to wait (429 retry_after) often under load. The queue waits at least a quarter of
        // the backoff step whatever Telegram says, so the steps grow slowly, and a storm takes many attempts.
        delivery: { backoffMs: [1_000, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000], maxAttempts: 15 },
        onEvent: (event) => {
          typing.onEvent(event)
          printEvent(event)
        }
      }).pipe(Effect.provide(model.layer))
      say(`switchyard telegram: @${me.username ?? me.id} is listening, answering with ${model.what}. Ctrl+C stops it.`)
      const { reason, report } = yield* serve({
        agent,
        main,
        input: poll({
          api,
          agent,
          stateFile: path.join(stateDir, "telegram", "state.json"),
          pollTimeoutS: options.pollTimeout,
          log: (line) => (line.startsWith("error: ") ? complain(line) : say(line))
        }),
        onStop: (signal) =>
          complain(
            `switchyard telegram: ${signal}: stopped polling, finishing the turns in flight (a second signal exits at once)`
          )
      })
      say(
        `bye (${reason}): ${report.drain.completed} turn(s) finished, ${report.pendingDeliveries} reply(ies) left for the next start` +
          (report.unanswered === 0 ? "" : `, ${report.unanswered} message(s) to answer on the next start`)
      )
      return 0
    }).pipe(
      Effect.scoped,
      Effect.catch((error: string | { readonly message?: string }) =>
        Effect.sync(() => {
          complain(`error: ${typeof error === "string" ? error : error.message ?? "unknown failure"}`)
          return 1
        })
      )
    )
  )
}

new Command("telegram")
  .description(
    "switchyard's Telegram bot: each text message is a user message of its chat; replies go through a durable delivery log.\n" +
      "TELEGRAM_BOT_TOKEN (from @BotFather) is required; TELEGRAM_API_BASE points it at another Bot API server;\n" +
      "Claude answers when ANTHROPIC_API_KEY is set."
  )
  .showSuggestionAfterError(false)
  .allowExcessArguments(false)
  .option("--state-dir <dir>", "delivery log, sessions and the poll offset", ".switchyard-telegram")
  .option("--offline", "use the scripted model even when ANTHROPIC_API_KEY is set", false)
  .option("--model <id>", "Claude model id")
  .option("--latency <ms>", "scripted model latency", integer("--latency", 0), 300)
  .option("--poll-timeout <s>", "getUpdates long-poll timeout in seconds", integer("--poll-timeout", 0, 50), 30)
  .option(
    "--drain-timeout <ms>",
    "how long a shutdown waits for turns and deliveries",
    integer("--drain-timeout", 1),
    10_000
  )
  .option(
    "--turn-timeout <ms>",
    "a turn with no progress this long (no streamed text) is cut; its messages are kept and tried again",
    integer("--turn-timeout", 1),
    Agent.DEFAULT_TURN_TIMEOUT_MS
  )
  .action((raw: Record<string, unknown>) =>
    run({
      stateDir: raw.stateDir as string,
      offline: raw.offline === true,
      ...(raw.model === undefined ? {} : { model: raw.model as string }),
      latency: raw.latency as number,
      pollTimeout: raw.pollTimeout as number,
      drainTimeout: raw.drainTimeout as number,
      turnTimeout: raw.turnTimeout as number
    })
  )
  .parse(process.argv)
