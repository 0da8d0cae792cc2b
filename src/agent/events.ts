/** What an agent reports while it works: the events `onEvent` receives, and the result of a turn. */
import type { DeliveryEntry } from "../delivery/index.js"
import type { ModelRetry } from "./Model.js"
import type { TurnKind } from "./Transcripts.js"

/** The outcome of a turn. */
export interface TurnResult {
  readonly session: string
  readonly kind: TurnKind
  /** The turn's number within its session (0 when there was nothing to answer). */
  readonly turn: number
  readonly text: string
  /** How many user messages the turn answered (1 for heartbeat and cron runs). */
  readonly messages: number
  /** A heartbeat reply of exactly `HEARTBEAT_OK`: not delivered. */
  readonly suppressed: boolean
  /** The delivery id of the reply (absent when suppressed or when there was nothing to answer); of its first part when it was split. */
  readonly id?: string
  /** A reply too large for one log record is delivered as several entries, in order: their ids. */
  readonly ids?: ReadonlyArray<string>
  readonly job?: string
}

/** An event of an agent, for a user interface or a log. Delivered to `onEvent` synchronously. */
export type AgentEvent =
  /** A turn started: `messages` user messages to answer (1 for heartbeat and cron runs). */
  | {
    readonly type: "turn-started"
    readonly kind: TurnKind
    readonly session: string
    readonly turn: number
    readonly messages: number
    readonly job?: string
  }
  /** A chunk of a reply as the model streams it. */
  | {
    readonly type: "text"
    readonly kind: TurnKind
    readonly session: string
    readonly turn: number
    readonly chunk: string
  }
  /**
   * The model's try failed and it tries again by itself (`retryInMs`: when, if the server said; a
   * `retry-after` can be tens of seconds): the turn goes on, slower. The last failure is `turn-failed`.
   */
  | ({
    readonly type: "model-retry"
    readonly kind: TurnKind
    readonly session: string
    readonly turn: number
  } & ModelRetry)
  /** A turn ended; its reply (unless suppressed) is in the delivery log. */
  | ({ readonly type: "turn-ended" } & TurnResult)
  /**
   * A turn failed (the model, the transcript or the log). `kept`: its accepted messages stay and
   * will be answered; then `retryInMs` is when the agent tries again by itself (absent: it waits for
   * a new message of the session, or `retry`; with `retryable: true`, absent means a shutdown began
   * and the next start answers it). `kept: false`: given up for good (the log refuses
   * the reply), the session moved on. `messages`: the session's accepted, unanswered messages.
   */
  | {
    readonly type: "turn-failed"
    readonly kind: TurnKind
    readonly session: string
    readonly error: string
    readonly messages: number
    readonly retryable: boolean
    readonly kept: boolean
    readonly retryInMs?: number
  }
  /** The delivery log's health changed (`DeliveryLog.health`). */
  | { readonly type: "log-health"; readonly status: "ok" | "failing"; readonly error?: string }
  /** A heartbeat turn ended. */
  | { readonly type: "heartbeat"; readonly suppressed: boolean; readonly text: string; readonly id?: string }
  /** The channel took an entry. */
  | { readonly type: "delivered"; readonly entry: DeliveryEntry }
  /** The channel failed an entry (it is retried, or dead when permanent / out of attempts). */
  | { readonly type: "delivery-failed"; readonly entry: DeliveryEntry; readonly error: string }
  /** On start: a session had accepted messages left (`messages`) or a reply to log (`replies`) from before. */
  | { readonly type: "recovered"; readonly session: string; readonly messages: number; readonly replies: number }
