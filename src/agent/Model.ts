/**
 * The language model an agent talks to, as an Effect service. Two layers provide it:
 * `AnthropicModel.layer` (Claude through the official SDK) and `ScriptedModel.layer`
 * (offline and deterministic, the embedded default).
 */
// Modules of effect, not its index: see CronJobs.ts.
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"

/** One message of a transcript. */
export interface TranscriptMessage {
  readonly role: "user" | "assistant"
  readonly content: string
}

/** What a turn asks of the model. */
export interface ModelRequest {
  /** The system prompt. */
  readonly system: string
  /** The conversation so far, ending with the turn's new user message(s). */
  readonly transcript: ReadonlyArray<TranscriptMessage>
  readonly maxTokens: number
  /** Called with each chunk of text as it streams in (a model that does not stream calls it once). */
  readonly onText?: (chunk: string) => void
  /**
   * Called when a try failed and the model tries again by itself (the Anthropic SDK's own retries):
   * a person waiting on the reply can be told why it takes longer. Not called for the last failure,
   * which is the `ModelError`.
   */
  readonly onRetry?: (retry: ModelRetry) => void
}

/** A failed try of a model call that will be tried again. */
export interface ModelRetry {
  /** Why the try failed (`"network"` when no answer came). */
  readonly reason: ModelErrorReason
  /** The HTTP status of the failed try, when it had one. */
  readonly status?: number
  /** When the next try goes, when the server said (`retry-after`); absent: a backoff of at most a few seconds. */
  readonly retryInMs?: number
  /** The number of this retry, from 1, and how many there are at most. */
  readonly retry: number
  readonly maxRetries: number
}

/**
 * One line for a retry, as a person reads it: `the model answered 429 (rate limited): trying again in
 * 20 s (retry 1 of 2)`; with `session`, `... 429 (rate limited) for session 42: ...`.
 */
export const describeModelRetry = (retry: ModelRetry, session?: string): string => {
  const why = retry.reason === "rate-limit" ? " (rate limited)" : retry.reason === "overloaded" ? " (overloaded)" : ""
  const what = retry.status === undefined
    ? "the model could not be reached"
    : `the model answered ${retry.status}${why}`
  const when = retry.retryInMs === undefined
    ? "trying again in a moment"
    : retry.retryInMs < 1000
    ? "trying again in under a second"
    : `trying again in ${Math.round(retry.retryInMs / 1000)} s`
  const whose = session === undefined ? "" : ` for session ${session}`
  return `${what}${whose}: ${when} (retry ${retry.retry} of ${retry.maxRetries})`
}

/** The model's answer to a turn. */
export interface ModelReply {
  readonly text: string
  /** Why the model stopped (e.g. `"end_turn"`, `"max_tokens"`), when it says. */
  readonly stopReason?: string
  readonly usage?: { readonly inputTokens: number; readonly outputTokens: number }
}

/** Why a model call failed. */
export type ModelErrorReason =
  | "auth"
  | "rate-limit"
  | "overloaded"
  | "timeout"
  | "invalid-request"
  | "network"
  | "unknown"

/** A model call failed; `retryable` says whether trying again later can help. Never carries the API key. */
export class ModelError extends Data.TaggedError("ModelError")<{
  readonly reason: ModelErrorReason
  readonly message: string
  readonly retryable: boolean
}> {}

/** The model service: `reply` answers one turn. Interrupting `reply` aborts the underlying request. */
export class Model extends Context.Service<Model, {
  readonly reply: (request: ModelRequest) => Effect.Effect<ModelReply, ModelError>
}>()("switchyard/agent/Model") {}

/** The prompt of a heartbeat turn, unless the agent is given another. */
export const DEFAULT_HEARTBEAT_PROMPT =
  "Heartbeat: check whether anything needs your attention. If nothing does, reply exactly HEARTBEAT_OK."

/** The reply that means "nothing to report"; a heartbeat reply exactly equal to it is not delivered. */
export const HEARTBEAT_OK = "HEARTBEAT_OK"
