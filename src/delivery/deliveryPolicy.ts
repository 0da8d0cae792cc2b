/**
 * The delivery queue's policy pieces, kept apart from its scheduling: option defaults and validation,
 * the jittered backoff, and how a failed attempt is described. Internal to `DeliveryQueue`.
 */
import { Cause, Effect, Option } from "effect"
import { LanesConfigInvalid } from "../queue/index.js"
import { DeliveryFailure } from "./errors.js"
import type { Options } from "./queueTypes.js"

/** Delays between retries of a failed log call (ack, attempt record, dead letter); the last repeats. */
export const LOG_RETRY_MS: ReadonlyArray<number> = [1_000, 5_000, 30_000]

/** Entries one recipient delivers in a row before it yields its slot to recipients that wait. */
export const TURN_BATCH = 32

/** The settings of a queue after defaults. */
export interface Policy {
  readonly concurrency: number
  readonly attemptTimeoutMs: number
  readonly backoffMs: ReadonlyArray<number>
  readonly jitter: number
  readonly maxAttempts: number
  /** Pending longer than this after `enqueuedAt`: dead, `lastError` "expired". Infinity: never. */
  readonly maxAgeMs: number
  /** Replayed entries that begin a first attempt per second (Infinity: no pacing). */
  readonly replayPerSecond: number
  /** After this long from start, replay starts no more old entries (Infinity: no bound). */
  readonly maxRecoveryMs: number
}

const show = (u: unknown): string => {
  if (typeof u === "string") return JSON.stringify(u)
  if (Array.isArray(u)) return "array"
  if (typeof u === "object" && u !== null) return "object"
  return String(u)
}

const invalid = (field: string, expected: string, value: unknown): Effect.Effect<never> =>
  Effect.die(
    new LanesConfigInvalid({ field, message: `Expected \`${field}\` to be ${expected}, got \`${show(value)}\`` })
  )

const isIntFrom1 = (n: unknown): n is number => typeof n === "number" && Number.isInteger(n) && n >= 1

/**
 * Applies the defaults and checks every option. A bad one is a defect (`LanesConfigInvalid` naming it,
 * in p-queue's tone): a queue that cannot run as configured fails loudly at start.
 */
export const resolvePolicy = (options: Options): Effect.Effect<Policy> =>
  Effect.suspend(() => {
    const concurrency = options.concurrency ?? 8
    const attemptTimeoutMs = options.attemptTimeoutMs ?? 30_000
    const backoffMs = options.backoffMs ?? [5_000, 25_000, 120_000, 600_000]
    const jitter = options.jitter ?? 0.2
    const maxAttempts = options.maxAttempts ?? 5
    if (typeof options.log !== "object" || options.log === null) return invalid("log", "a DeliveryLog", options.log)
    if (typeof options.deliver !== "function") return invalid("deliver", "a function", options.deliver)
    if (!isIntFrom1(concurrency)) return invalid("concurrency", "an integer from 1 and up", concurrency)
    if (typeof attemptTimeoutMs !== "number" || !(attemptTimeoutMs > 0)) {
      return invalid("attemptTimeoutMs", "a number above 0 (Infinity for no bound)", attemptTimeoutMs)
    }
    if (!Array.isArray(backoffMs) || backoffMs.length === 0) {
      return invalid("backoffMs", "a non-empty array of delays in ms", backoffMs)
    }
    for (let i = 0; i < backoffMs.length; i++) {
      const b: unknown = backoffMs[i]
      if (typeof b !== "number" || !Number.isFinite(b) || b < 0) {
        return invalid(`backoffMs[${i}]`, "a finite number from 0 and up", b)
      }
    }
    if (typeof jitter !== "number" || !(jitter >= 0 && jitter <= 1)) {
      return invalid("jitter", "a number from 0 through 1", jitter)
    }
    if (!isIntFrom1(maxAttempts)) return invalid("maxAttempts", "an integer from 1 and up", maxAttempts)
    if (options.classify !== undefined && typeof options.classify !== "function") {
      return invalid("classify", "a function (error, entry) => { permanent, retryAfterMs? }", options.classify)
    }
    const maxAgeMs = options.maxAgeMs ?? Infinity
    if (typeof maxAgeMs !== "number" || !(maxAgeMs > 0)) {
      return invalid("maxAgeMs", "a number of ms above 0 (Infinity: never)", maxAgeMs)
    }
    const replay: unknown = options.replay ?? {}
    if (typeof replay !== "object" || replay === null) {
      return invalid("replay", "an object { maxPerSecond?, maxRecoveryMs? }", replay)
    }
    const { maxPerSecond = Infinity, maxRecoveryMs = Infinity } = replay as {
      maxPerSecond?: unknown
      maxRecoveryMs?: unknown
    }
    if (maxPerSecond !== Infinity && !isIntFrom1(maxPerSecond)) {
      return invalid("replay.maxPerSecond", "an integer from 1 and up (Infinity: no pacing)", maxPerSecond)
    }
    if (typeof maxRecoveryMs !== "number" || !(maxRecoveryMs > 0)) {
      return invalid("replay.maxRecoveryMs", "a number of ms above 0 (Infinity: no bound)", maxRecoveryMs)
    }
    return Effect.succeed({
      concurrency,
      attemptTimeoutMs,
      backoffMs: [...(backoffMs as ReadonlyArray<number>)],
      jitter,
      maxAttempts,
      maxAgeMs,
      replayPerSecond: maxPerSecond as number,
      maxRecoveryMs
    })
  })

/** The delay before the next attempt after `attempts` failures: `backoffMs[attempts - 1]` (the last repeats), scaled by a factor in `[1 - jitter, 1 + jitter]` (`random` in [0, 1)). */
export const backoffDelay = (policy: Policy, attempts: number, random: number): number => {
  const { backoffMs, jitter } = policy
  const base = backoffMs[Math.min(Math.max(attempts, 1), backoffMs.length) - 1]
  return Math.max(0, Math.round(base * (1 + jitter * (2 * random - 1))))
}

/** A failed attempt: the message to record, the value to classify, and whether it was a defect. */
export interface AttemptFailure {
  readonly message: string
  /** What the classifier judges: the typed failure, the defect, or a `DeliveryFailure` for an interruption. */
  readonly error: unknown
  readonly defect: boolean
}

/** Describes the cause of a failed attempt: a typed failure (`DeliveryFailure` or alike), a defect, or an interruption. */
export const failureOf = (cause: Cause.Cause<unknown>): AttemptFailure => {
  const error = Cause.findErrorOption(cause)
  if (Option.isSome(error)) {
    const e = error.value
    const fields = typeof e === "object" && e !== null ? (e as { readonly message?: unknown }) : undefined
    const message = fields !== undefined && typeof fields.message === "string" ? fields.message : String(e)
    return { message, error: e, defect: false }
  }
  const defect = Cause.findDefect(cause)
  if (defect._tag === "Success") {
    const d = defect.success
    return { message: `deliver died: ${d instanceof Error ? d.message : String(d)}`, error: d, defect: true }
  }
  return {
    message: "deliver was interrupted",
    error: new DeliveryFailure({ message: "deliver was interrupted" }),
    defect: false
  }
}
