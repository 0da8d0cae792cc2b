/** What a failed turn's error means for its session: retry later, wait for the user, or give up and move on. */

/** The message of an error, or its text. */
export const errorText = (error: unknown): string =>
  typeof error === "object" && error !== null && "message" in error
    ? String((error as { message: unknown }).message)
    : String(error)

/** How a failed turn is handled. */
export interface Classified {
  readonly text: string
  /** Trying again later can help (the automatic retries apply). */
  readonly retryable: boolean
  /** It failed on the disk or the delivery log. */
  readonly io: boolean
  /** It will never succeed (the log refuses the reply as too large or invalid): the turn is given up. */
  readonly final: boolean
  /** Not a failure of the turn's own: `stale` (restartLane resumes it), `closed`/`canceled` (shutting down). */
  readonly ignore: boolean
}

const tagged = (error: unknown): { readonly _tag?: unknown; readonly reason?: unknown; readonly retryable?: unknown } =>
  typeof error === "object" && error !== null ? error : {}

/** Classifies an error of a turn (a `TurnError`, a `QueueFailure`, or a defect). */
export const classify = (error: unknown): Classified => {
  const e = tagged(error)
  const text = errorText(error)
  const base = { text, retryable: true, io: false, final: false, ignore: false }
  switch (e._tag) {
    case "ModelError":
      return { ...base, retryable: e.retryable === true }
    case "TranscriptError":
      return e.reason === "io" ? { ...base, io: true } : { ...base, retryable: false }
    case "DeliveryLogError":
      return e.reason === "too-large" || e.reason === "invalid" || e.reason === "not-pending"
        ? { ...base, retryable: false, final: true }
        : { ...base, io: true }
    case "QueueFailure":
      if (e.reason !== "timeout") return { ...base, ignore: true }
      // the queue's message names a run id; say what happened to the turn instead
      return {
        ...base,
        text: (error as { readonly stage?: unknown }).stage === "queued"
          ? "the turn waited longer than its lane's queueTimeoutMs to start"
          : "the turn made no progress within its turnTimeoutMs and was cut (its model request aborted)"
      }
    default:
      return base
  }
}

/** Whether `s` is well-formed UTF-16 (no lone surrogate): the log refuses keys that are not. */
export const isWellFormed = (s: string): boolean =>
  !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s)
