/** The delivery part's typed failures. */
import { Data } from "effect"

/** Why a delivery log call failed. */
export type DeliveryLogErrorReason =
  | "io"
  | "corrupt"
  | "locked"
  | "too-large"
  | "invalid"
  | "unknown-id"
  | "not-pending"
  | "closed"

/**
 * A delivery log call failed. `message` says what happened and what to change; `path` names the file
 * (and, for `corrupt`, the message names the offset) where it applies.
 */
export class DeliveryLogError extends Data.TaggedError("DeliveryLogError")<{
  readonly reason: DeliveryLogErrorReason
  readonly message: string
  readonly path?: string
}> {}

/**
 * A delivery attempt failed: what a channel fails with. The queue's `classify` (by default
 * `DeliveryQueue.defaultClassify`) decides what happens next:
 * - `permanent`, when set, decides: `true` gives up at once (the entry goes to the dead letters).
 * - otherwise `status`, the HTTP status the channel got: 4xx is permanent except 408, 409, 425 and 429;
 *   5xx retries. No `status` (a connection error) retries.
 * - `retryAfterMs`, or `retryAfter` (a `Retry-After` header value: delay-seconds or an HTTP date),
 *   replaces that attempt's backoff step (kept within `[jittered step / 4, last backoff step]`).
 */
export class DeliveryFailure extends Data.TaggedError("DeliveryFailure")<{
  readonly message: string
  readonly permanent?: boolean
  /** The HTTP status the channel got, if it got one. */
  readonly status?: number | undefined
  /** The other side asked to wait this long (ms) before the next attempt. */
  readonly retryAfterMs?: number | undefined
  /** The other side's `Retry-After` header as given: delay-seconds (`"120"`) or an HTTP date. */
  readonly retryAfter?: string | undefined
}> {}
