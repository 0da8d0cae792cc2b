/**
 * The chatbot's Effect logs. The library logs warnings a person at the prompt does not need to see
 * (`task run-2 waited 3516 ms` is a coalesced turn waiting its turn, as it should): they are kept
 * (the last few) for `/status`, and printed on standard error only at `--log-level` and above
 * (`--debug` is `--log-level debug`). Default: none in an interactive terminal, `warn` otherwise.
 */
import { Cause, Effect, Logger, LogLevel, References } from "effect"
import { inspect } from "node:util"
import type { LogLevelOption } from "./cli.js"

/** A log line kept for `/status`. */
export interface KeptLog {
  readonly at: Date
  readonly level: string
  readonly message: string
}

export interface Logs {
  /** Runs `effect` with these logs (and every fiber it forks). */
  readonly provide: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** Warnings and errors logged so far, and the last few of them. */
  readonly warnings: () => { readonly count: number; readonly recent: ReadonlyArray<KeptLog> }
  readonly level: LogLevelOption
}

const KEEP = 5

const EFFECT_LEVEL: Record<LogLevelOption, LogLevel.LogLevel> = {
  none: "None",
  error: "Error",
  warn: "Warn",
  info: "Info",
  debug: "Debug"
}

const text = (message: unknown): string =>
  (Array.isArray(message) ? message : [message]).map((part) => (typeof part === "string" ? part : String(part))).join(
    " "
  )

/** A failure as one line: an Error's message, a string as it is, anything else inspected. */
const failureText = (failure: unknown): string =>
  failure instanceof Error
    ? failure.message
    : typeof failure === "string"
    ? failure
    : inspect(failure, { breakLength: Infinity })

/** `print` writes one line (standard error, through the screen in a terminal). */
export const makeLogs = (level: LogLevelOption, print: (line: string) => void): Logs => {
  const printFrom = EFFECT_LEVEL[level]
  const recent: Array<KeptLog> = []
  let count = 0
  const logger = Logger.make((options) => {
    const squashed = options.cause.reasons.length === 0 ? undefined : Cause.squash(options.cause)
    const cause = squashed === undefined ? "" : `: ${failureText(squashed)}`
    const message = `${text(options.message)}${cause}`.replace(/\s*\n\s*/g, " ")
    if (LogLevel.isGreaterThanOrEqualTo(options.logLevel, "Warn")) {
      count++
      recent.push({ at: options.date, level: options.logLevel.toUpperCase(), message })
      if (recent.length > KEEP) recent.shift()
    }
    if (printFrom !== "None" && LogLevel.isGreaterThanOrEqualTo(options.logLevel, printFrom)) {
      print(`${options.logLevel.toUpperCase()} ${message}`)
    }
  })
  // Warnings are always kept; lower levels only reach the logger when they are printed.
  const minimum: LogLevel.LogLevel = printFrom === "Info" || printFrom === "Debug" ? printFrom : "Warn"
  return {
    provide: (effect) =>
      effect.pipe(
        Effect.provideService(Logger.CurrentLoggers, new Set([logger])),
        Effect.provideService(References.MinimumLogLevel, minimum)
      ),
    warnings: () => ({ count, recent: [...recent] }),
    level
  }
}
