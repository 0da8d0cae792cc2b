/**
 * The chatbot's command line (commander): every option validated before anything runs, so a bad
 * option or value gives one line naming it, a non-zero exit, and nothing written.
 */
import { Command, InvalidArgumentError, Option } from "commander"
import * as fs from "node:fs"
// Narrow imports: the command line is parsed (and the state paths checked) before the agent loads.
import { parseCronFlag } from "../../src/agent/CronJobs.js"
import type { CronJob } from "../../src/agent/CronJobs.js"
import { HEARTBEAT_SESSION } from "../../src/agent/Heartbeat.js"
import { DEFAULT_TURN_TIMEOUT_MS } from "../../src/agent/turnTimeouts.js"
import { parseWebhookUrl, shownUrl } from "../../src/agent/webhookUrl.js"

/** Which Effect logs are printed (on standard error); the warnings are kept for `/status` whatever the level. */
export type LogLevelOption = "none" | "error" | "warn" | "info" | "debug"

const LOG_LEVELS: ReadonlyArray<LogLevelOption> = ["none", "error", "warn", "info", "debug"]

/** The package's version (package.json at the repository root). */
export const packageVersion = (): string => {
  const file = new URL("../../package.json", import.meta.url)
  return (JSON.parse(fs.readFileSync(file, "utf8")) as { version: string }).version
}

/** What `npm run chat` was asked to do. */
export interface ChatOptions {
  readonly stateDir: string
  readonly session: string
  readonly model?: string
  readonly offline: boolean
  readonly latency: number
  readonly heartbeat?: number
  readonly cron: ReadonlyArray<CronJob>
  readonly outbox?: string
  /** Deliver by POSTing each reply to this http(s) URL (WebhookChannel). */
  readonly webhook?: string
  readonly json: boolean
  readonly drainTimeout: number
  /** A turn that makes no progress this long is cut and its messages tried again later. */
  readonly turnTimeout: number
  /** Which Effect logs are printed; `undefined`: none in an interactive terminal, `warn` otherwise. */
  readonly logLevel?: LogLevelOption
}

/** What `npm run chat -- deliveries` was asked to do. */
export interface DeliveriesOptions {
  readonly stateDir: string
  readonly retryDead: boolean
  readonly json: boolean
}

const integer = (flag: string, from: number) => (value: string): number => {
  const n = /^\s*\d+\s*$/.test(value) ? Number(value) : Number.NaN
  if (!Number.isSafeInteger(n) || n < from) {
    throw new InvalidArgumentError(`Expected \`${flag}\` to be an integer from ${from} and up, got \`${value}\``)
  }
  return n
}

const nonEmpty = (flag: string) => (value: string): string => {
  if (value.trim() === "") {
    throw new InvalidArgumentError(`Expected \`${flag}\` to be a non-empty string, got \`${value}\``)
  }
  return value
}

const sessionId = (value: string): string => {
  const id = nonEmpty("--session")(value)
  if (id === HEARTBEAT_SESSION || id.startsWith("cron:")) {
    throw new InvalidArgumentError(
      `Expected \`--session\` not to be \`heartbeat\` or start with \`cron:\`, got \`${value}\``
    )
  }
  return id
}

const logLevel = (value: string): LogLevelOption => {
  const level = value.trim().toLowerCase() as LogLevelOption
  if (!LOG_LEVELS.includes(level)) {
    throw new InvalidArgumentError(`Expected \`--log-level\` to be one of ${LOG_LEVELS.join(", ")}, got \`${value}\``)
  }
  return level
}

const collectCron = (value: string, previous: Array<CronJob> | undefined): Array<CronJob> => {
  const jobs = previous ?? []
  const job = parseCronFlag(value, jobs.length + 1)
  if (typeof job === "string") throw new InvalidArgumentError(job)
  return [...jobs, job]
}

/**
 * Refuses operands: commander's own message ("too many arguments") does not say which one. A
 * mistyped command (`deliverys`) or a value whose flag took the next word lands here.
 */
const refuseOperands = (command: Command, what: string): void => {
  const extra = command.args[0]
  if (extra === undefined) return
  command.error(`error: unexpected argument \`${extra}\`: ${what} (see --help)`)
}

/**
 * The commander program. `onChat` / `onDeliveries` receive validated options; commander itself
 * handles `--help` (exit 0) and errors (one line on stderr, exit 1).
 */
export const makeProgram = (handlers: {
  readonly onChat: (options: ChatOptions) => void
  readonly onDeliveries: (options: DeliveriesOptions) => void
}): Command => {
  const program = new Command("chat")
    .description(
      "A chat agent on switchyard: each line of standard input is a user message; replies go through a durable delivery log.\n" +
        "Offline (the scripted model) unless ANTHROPIC_API_KEY is set; ANTHROPIC_BASE_URL is honoured."
    )
    .version(packageVersion(), "--version", "print the version")
    .enablePositionalOptions()
    .showSuggestionAfterError(false)
    .allowExcessArguments(true)
    .option("--state-dir <dir>", "delivery log and sessions", nonEmpty("--state-dir"), ".switchyard-chat")
    .option("--session <id>", "session for lines typed", sessionId, "local")
    .option("--model <id>", "Claude model id", nonEmpty("--model"))
    .option("--offline", "use the scripted model even when a key is set", false)
    .option("--latency <ms>", "scripted model latency", integer("--latency", 0), 300)
    .option("--heartbeat <ms>", "heartbeat period (default: off)", integer("--heartbeat", 1))
    .addOption(
      new Option("--cron <expr|prompt>", "a cron job, repeatable; the job is named cron-1, cron-2, ...").argParser(
        collectCron
      )
    )
    .option("--outbox <file>", "deliver by appending JSON lines to <file> instead of printing", nonEmpty("--outbox"))
    .addOption(
      new Option(
        "--webhook <url>",
        "deliver by POSTing each reply as JSON { id, channel, to, body } to <url> (http or https)"
      )
        .argParser((value: string): string => {
          const url = parseWebhookUrl(value, "--webhook")
          // Not InvalidArgumentError: commander would repeat the argument as given, a password included.
          if (typeof url === "string") {
            program.error(`error: option '--webhook <url>' argument '${shownUrl(value)}' is invalid. ${url}`)
          }
          return value
        })
        .conflicts("outbox")
    )
    .option("--json", "print events as JSON lines", false)
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
      DEFAULT_TURN_TIMEOUT_MS
    )
    .option(
      "--log-level <level>",
      "which internal logs to print on standard error: none, error, warn, info, debug (default: none in a terminal, warn otherwise; /status shows the warnings)",
      logLevel
    )
    .option("--debug", "the same as --log-level debug", false)
    .action((raw: Record<string, unknown>, command: Command) => {
      refuseOperands(command, "the only command is `deliveries`; messages are read from standard input")
      handlers.onChat({
        stateDir: raw.stateDir as string,
        session: raw.session as string,
        ...(raw.model === undefined ? {} : { model: raw.model as string }),
        offline: raw.offline === true,
        latency: raw.latency as number,
        ...(raw.heartbeat === undefined ? {} : { heartbeat: raw.heartbeat as number }),
        cron: (raw.cron as Array<CronJob> | undefined) ?? [],
        ...(raw.outbox === undefined ? {} : { outbox: raw.outbox as string }),
        ...(raw.webhook === undefined ? {} : { webhook: raw.webhook as string }),
        json: raw.json === true,
        drainTimeout: raw.drainTimeout as number,
        turnTimeout: raw.turnTimeout as number,
        ...(raw.debug === true
          ? { logLevel: "debug" as const }
          : raw.logLevel === undefined
          ? {}
          : { logLevel: raw.logLevel as LogLevelOption })
      })
    })

  program
    .command("deliveries")
    .description("print the pending and dead entries of the delivery log, and the counts")
    .showSuggestionAfterError(false)
    .allowExcessArguments(true)
    .option("--state-dir <dir>", "delivery log and sessions", nonEmpty("--state-dir"), ".switchyard-chat")
    .option("--retry-dead", "put dead entries back to pending", false)
    .option("--json", "print one JSON object", false)
    .action((raw: Record<string, unknown>, command: Command) => {
      refuseOperands(command, "`deliveries` takes options only")
      handlers.onDeliveries({
        stateDir: raw.stateDir as string,
        retryDead: raw.retryDead === true,
        json: raw.json === true
      })
    })
  return program
}
