/**
 * The chatbot's command line (commander): every option validated before anything runs, so a bad
 * option or value gives one line naming it, a non-zero exit, and nothing written.
 */
import { Command, InvalidArgumentError, Option } from "commander"
import { isReservedSession, parseCronFlag } from "../../src/agent/index.js"
import type { CronJob } from "../../src/agent/index.js"

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
  readonly json: boolean
  readonly drainTimeout: number
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
  if (value.trim() === "") throw new InvalidArgumentError(`Expected \`${flag}\` to be a non-empty string, got \`${value}\``)
  return value
}

const sessionId = (value: string): string => {
  const id = nonEmpty("--session")(value)
  if (isReservedSession(id)) {
    throw new InvalidArgumentError(`Expected \`--session\` not to be \`heartbeat\` or start with \`cron:\`, got \`${value}\``)
  }
  return id
}

const collectCron = (value: string, previous: Array<CronJob> | undefined): Array<CronJob> => {
  const jobs = previous ?? []
  const job = parseCronFlag(value, jobs.length + 1)
  if (typeof job === "string") throw new InvalidArgumentError(job)
  return [...jobs, job]
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
    .enablePositionalOptions()
    .showSuggestionAfterError(false)
    .allowExcessArguments(false)
    .option("--state-dir <dir>", "delivery log and sessions", nonEmpty("--state-dir"), ".switchyard-chat")
    .option("--session <id>", "session for lines typed", sessionId, "local")
    .option("--model <id>", "Claude model id", nonEmpty("--model"))
    .option("--offline", "use the scripted model even when a key is set", false)
    .option("--latency <ms>", "scripted model latency", integer("--latency", 0), 300)
    .option("--heartbeat <ms>", "heartbeat period (default: off)", integer("--heartbeat", 1))
    .addOption(
      new Option("--cron <expr|prompt>", "a cron job, repeatable; the job is named cron-1, cron-2, ...").argParser(collectCron)
    )
    .option("--outbox <file>", "deliver by appending JSON lines to <file> instead of printing", nonEmpty("--outbox"))
    .option("--json", "print events as JSON lines", false)
    .option("--drain-timeout <ms>", "how long a shutdown waits for turns and deliveries", integer("--drain-timeout", 1), 10_000)
    .action((raw: Record<string, unknown>) => {
      handlers.onChat({
        stateDir: raw.stateDir as string,
        session: raw.session as string,
        ...(raw.model === undefined ? {} : { model: raw.model as string }),
        offline: raw.offline === true,
        latency: raw.latency as number,
        ...(raw.heartbeat === undefined ? {} : { heartbeat: raw.heartbeat as number }),
        cron: (raw.cron as Array<CronJob> | undefined) ?? [],
        ...(raw.outbox === undefined ? {} : { outbox: raw.outbox as string }),
        json: raw.json === true,
        drainTimeout: raw.drainTimeout as number
      })
    })

  program
    .command("deliveries")
    .description("print the pending and dead entries of the delivery log, and the counts")
    .showSuggestionAfterError(false)
    .allowExcessArguments(false)
    .option("--state-dir <dir>", "delivery log and sessions", nonEmpty("--state-dir"), ".switchyard-chat")
    .option("--retry-dead", "put dead entries back to pending", false)
    .option("--json", "print one JSON object", false)
    .action((raw: Record<string, unknown>) => {
      handlers.onDeliveries({
        stateDir: raw.stateDir as string,
        retryDead: raw.retryDead === true,
        json: raw.json === true
      })
    })
  return program
}
