/**
 * How the delivery queue judges a failed attempt: permanent or not, and whether the other side asked
 * for a delay (`Retry-After`). The default classifier reads the HTTP-ish fields a channel's error
 * carries (`DeliveryFailure`'s `permanent`, `status`, `retryAfterMs`, `retryAfter`, or the same names
 * on any error object, a `headers` map included).
 */
import { Effect } from "effect"
import type { DeliveryEntry } from "./types.js"

/** What a classifier decides about one failure. */
export interface Classification {
  /** Give up: the entry goes to the dead letters without another attempt. */
  readonly permanent: boolean
  /**
   * Wait this long before the next attempt instead of the backoff step (the queue keeps it within
   * `[jittered step / 4, last backoff step]`).
   */
  readonly retryAfterMs?: number
}

/** Decides for every failure of `deliver` (a typed failure, a defect, a timeout). */
export type Classify = (error: unknown, entry: DeliveryEntry) => Classification

/** 4xx statuses that are worth another try: Request Timeout, Conflict, Too Early, Too Many Requests. */
const RETRYABLE_4XX: ReadonlySet<number> = new Set([408, 409, 425, 429])

type Fields = { readonly [k: string]: unknown }

const fieldsOf = (u: unknown): Fields | undefined => (typeof u === "object" && u !== null ? (u as Fields) : undefined)

const statusOf = (e: Fields): number | undefined => {
  for (const s of [e["status"], e["statusCode"], fieldsOf(e["response"])?.["status"]]) {
    if (typeof s === "number" && Number.isInteger(s)) return s
  }
  return undefined
}

/** A header value from a `Headers`-like object (`get`) or a plain record, case-insensitively. */
const headerOf = (headers: unknown, name: string): unknown => {
  const h = fieldsOf(headers)
  if (h === undefined) return undefined
  if (typeof h["get"] === "function") return (h["get"] as (n: string) => unknown).call(h, name)
  for (const k of Object.keys(h)) if (k.toLowerCase() === name) return h[k]
  return undefined
}

/**
 * A `Retry-After` value in ms from `now`: delay-seconds (`"120"`, or a number of seconds) or an HTTP
 * date (`"Wed, 21 Oct 2015 07:28:00 GMT"`; a date in the past is 0). Anything else: undefined.
 */
export const parseRetryAfter = (value: unknown, now: number): number | undefined => {
  if (typeof value === "number") return Number.isFinite(value) && value >= 0 ? value * 1000 : undefined
  if (typeof value !== "string") return undefined
  const s = value.trim()
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s) * 1000
  const at = Date.parse(s)
  if (Number.isNaN(at) || !/[a-z]/i.test(s)) return undefined
  return Math.max(0, at - now)
}

const retryAfterOf = (e: Fields, now: number): number | undefined => {
  const ms = e["retryAfterMs"]
  if (typeof ms === "number" && Number.isFinite(ms) && ms >= 0) return ms
  for (
    const v of [
      e["retryAfter"],
      headerOf(e["headers"], "retry-after"),
      headerOf(fieldsOf(e["response"])?.["headers"], "retry-after")
    ]
  ) {
    const parsed = parseRetryAfter(v, now)
    if (parsed !== undefined) return parsed
  }
  return undefined
}

/**
 * The default classifier. `permanent` on the error decides when it is set; otherwise an HTTP `status`
 * of 4xx is permanent except 408, 409, 425 and 429; 5xx, connection errors (no status), timeouts and
 * defects retry. `retryAfterMs`, else `retryAfter` (seconds or an HTTP date, counted from `now`),
 * else a `Retry-After` in the error's `headers`, becomes `retryAfterMs`.
 */
export const defaultClassify = (error: unknown, _entry?: DeliveryEntry, now: number = Date.now()): Classification => {
  const e = fieldsOf(error)
  if (e === undefined) return { permanent: false }
  const status = statusOf(e)
  const permanent = typeof e["permanent"] === "boolean"
    ? e["permanent"]
    : status !== undefined && status >= 400 && status < 500 && !RETRYABLE_4XX.has(status)
  const retryAfterMs = retryAfterOf(e, now)
  return retryAfterMs === undefined ? { permanent } : { permanent, retryAfterMs }
}

/**
 * The delay before the next attempt: `step` (the jittered backoff step), or the classifier's
 * `retryAfterMs` kept within `[step / 4, lastStep]`.
 */
export const retryDelay = (step: number, retryAfterMs: number | undefined, lastStep: number): number => {
  if (retryAfterMs === undefined || !Number.isFinite(retryAfterMs)) return step
  return Math.round(Math.min(Math.max(retryAfterMs, step / 4), lastStep))
}

/**
 * The queue's use of a classifier: `classify` (the default one when undefined) as an Effect; one that
 * throws or answers something else than `{ permanent: boolean }` falls back to the default, with a warning.
 */
export const makeJudge =
  (classify: Classify | undefined) =>
  (error: unknown, entry: DeliveryEntry, now: number): Effect.Effect<Classification> => {
    if (classify === undefined) return Effect.succeed(defaultClassify(error, entry, now))
    let why: string
    try {
      const v = classify(error, entry)
      if (typeof v === "object" && v !== null && typeof v.permanent === "boolean") return Effect.succeed(v)
      why = `returned \`${JSON.stringify(v) ?? typeof v}\`, expected { permanent: boolean, retryAfterMs?: number }`
    } catch (e) {
      why = `threw (${e instanceof Error ? e.message : String(e)})`
    }
    return Effect.as(
      Effect.logWarning(`DeliveryQueue: classify ${why} for entry ${entry.id}; using the default classifier`),
      defaultClassify(error, entry, now)
    )
  }
