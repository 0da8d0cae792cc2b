/** The delivery part's typed failures. */
import { Data } from "effect"

/** Why a delivery log call failed. */
export type DeliveryLogErrorReason = "io" | "corrupt" | "locked" | "too-large" | "invalid" | "unknown-id" | "not-pending" | "closed"

/**
 * A delivery log call failed. `message` says what happened and what to change; `path` names the file
 * (and, for `corrupt`, the message names the offset) where it applies.
 */
export class DeliveryLogError extends Data.TaggedError("DeliveryLogError")<{
  readonly reason: DeliveryLogErrorReason
  readonly message: string
  readonly path?: string
}> {}

/** A delivery attempt failed. A `permanent` failure is not retried: the entry goes to the dead letters. */
export class DeliveryFailure extends Data.TaggedError("DeliveryFailure")<{
  readonly message: string
  readonly permanent?: boolean
}> {}
