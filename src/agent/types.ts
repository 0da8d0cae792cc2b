/**
 * The agent's public shapes: its options, what a turn and `send` can fail with, what `snapshot`
 * and `shutdown` report. Imports nothing above it (`Agent.ts` re-exports these).
 */
import type { DeliveryLog, DeliveryLogError, DeliveryQueue } from "../delivery/index.js"
import type { AdmissionError, CommandQueue, RequestError } from "../queue/index.js"
import type { Channel } from "./Channel.js"
import type { CronJob } from "./CronJobs.js"
import type { AgentEvent } from "./events.js"
import type { HeartbeatOptions } from "./Heartbeat.js"
import type { LogHealthStatus } from "./logHealth.js"
import type { ModelError } from "./Model.js"
import type { MessageTooLarge } from "./replies.js"
import type { UnansweredSession } from "./retries.js"
import type { TranscriptError } from "./Transcripts.js"

/** Options of `Agent.make`. */
export interface AgentOptions {
  /** The folder of the delivery log (`<stateDir>/deliveries`) and the transcripts (`<stateDir>/sessions`); created 0700. */
  readonly stateDir: string
  /** Where replies go. */
  readonly channel: Channel
  /** The system prompt of every turn (default: a short helpful-assistant prompt). */
  readonly system?: string
  /** How many turns a session's transcript keeps (default 20). */
  readonly historyLimit?: number
  /** `maxTokens` of every model call (default 1024). */
  readonly maxTokens?: number
  /** A heartbeat turn every `everyMs` (default: none). */
  readonly heartbeat?: HeartbeatOptions
  /** Cron jobs (default: none). */
  readonly cron?: ReadonlyArray<CronJob>
  /** Lane limits, merged over the queue's defaults. */
  readonly lanes?: Record<string, CommandQueue.LaneLimits>
  /**
   * A turn of `main`, `heartbeat` or `cron` that makes no progress this long is cut, and its
   * messages kept and tried again later (default 300 000; a lane's own `turnTimeoutMs` in `lanes`
   * wins). A streaming model call renews it per event, so only a stuck turn is cut.
   */
  readonly turnTimeoutMs?: number
  /** How long `shutdown` (and closing the Scope) waits for turns and deliveries in flight (default 30 000). */
  readonly drainTimeoutMs?: number
  /** Recipient of heartbeat and cron replies before any user message arrived (default `"local"`). */
  readonly defaultSession?: string
  /** `"always"` (default) syncs the delivery log and the transcripts; `"never"` is for tests only. */
  readonly fsync?: "always" | "never"
  /** Options of the delivery queue (retries, backoff, timeouts). */
  readonly delivery?: Omit<DeliveryQueue.Options, "log" | "deliver">
  /** Another store instead of the file log in `stateDir` (e.g. an in-memory log in tests). */
  readonly log?: DeliveryLog.DeliveryLog
  /** Called synchronously for every event (turns, streamed text, heartbeats, deliveries); it must not throw. */
  readonly onEvent?: (event: AgentEvent) => void
  /**
   * The delivery log's record limit (default 1 MiB; passed to the file log): a larger message is
   * refused at `send` (`MessageTooLarge`), a larger reply is delivered as several entries.
   */
  readonly maxRecordBytes?: number
  /** At most this many accepted messages go to one model call; the rest go to the next turn (default: all). */
  readonly maxMessagesPerTurn?: number
}

/** What a turn can fail with (besides the queue's `QueueFailure`). */
export type TurnError = ModelError | TranscriptError | DeliveryLogError

/** What `send` can fail with: nothing was accepted then. */
export type SendError = AdmissionError | RequestError | MessageTooLarge | TranscriptError

/** What `snapshot` reports. */
export interface AgentSnapshot {
  readonly lanes: ReadonlyArray<CommandQueue.LaneSnapshot>
  readonly deliveries: DeliveryQueue.Stats
  readonly lastActiveSession: string
  /** Sessions with messages accepted and not answered (and why their turns fail, when they do). */
  readonly unanswered: ReadonlyArray<UnansweredSession>
  /** The delivery log's health (`DeliveryLog.health`; always ok for a log that does not report it). */
  readonly log: LogHealthStatus
}

/** What `shutdown` reports. */
export interface ShutdownReport {
  readonly drain: CommandQueue.DrainReport
  /** Entries still pending in the delivery log (they are delivered on the next start). */
  readonly pendingDeliveries: number
  /** User messages accepted and not answered (they are answered on the next start). */
  readonly unanswered: number
}
