/**
 * The queue's typed failures. Every expected failure is a value with a `_tag`;
 * defects are bugs, not API.
 */
import { Data } from "effect"

/** The most keys (or tasks) a lane may hold waiting: the upper bound of `maxQueued` / `queued`. */
export const MAX_QUEUED = 10_000

/** A wake would add one more waiting key while `maxQueued` keys already wait. */
export class LaneQueueFull extends Data.TaggedError("LaneQueueFull")<{
  readonly key: unknown
  readonly maxQueued: number
}> {
  override get message(): string {
    return `Lanes queue is full: ${this.maxQueued} keys already wait`
  }
}

/** The lanes were closed: no more wakes are taken. */
export class LanesClosed extends Data.TaggedError("LanesClosed") {
  override get message(): string {
    return "Lanes are closed"
  }
}

/** A bad option given to `createLanes` or `CommandQueue.make`; `field` names the option (its path). */
export class LanesConfigInvalid extends Data.TaggedError("LanesConfigInvalid")<{
  readonly field: string
  readonly message: string
}> {}

/** `dispatch` refused before taking ownership: the lane is draining / drained, or at its bound. */
export class AdmissionError extends Data.TaggedError("AdmissionError")<{
  readonly lane: string
  readonly key: string
  readonly reason: "closed" | "full"
}> {
  override get message(): string {
    return this.reason === "closed"
      ? `Lane \`${this.lane}\` does not take work: the queue is draining or drained`
      : `Lane \`${this.lane}\` is full: it owns as many tasks as \`concurrent + queued\` allow`
  }
}

/** `dispatch` (or another call) named an unknown lane, an empty key, or a bad option. */
export class RequestError extends Data.TaggedError("RequestError")<{
  readonly lane: string
  readonly key: string
  readonly message: string
  /** The bad option's path, when a limit was bad (`limits.concurrent`). */
  readonly field?: string
}> {}

/** The stage a task was in when the queue failed it. */
export type QueueFailureStage = "queued" | "running"
/** Why the queue failed a task it had admitted. */
export type QueueFailureReason = "canceled" | "timeout" | "closed" | "stale"
/** Whether a lane's work blocks a user (`blocking`) or runs behind the scenes (`background`). */
export type Participation = "blocking" | "background"

/** The queue failed a task it had admitted: it was canceled, timed out, closed by a drain, or made stale by `restartLane`. */
export class QueueFailure extends Data.TaggedError("QueueFailure")<{
  readonly runId: string
  readonly lane: string
  readonly key: string
  readonly participation: Participation
  readonly stage: QueueFailureStage
  readonly reason: QueueFailureReason
}> {
  override get message(): string {
    return `Task ${this.runId} (lane \`${this.lane}\`) failed while ${this.stage}: ${this.reason}`
  }
}

/** `awaitTimeout` / `wait` passed its deadline before the task ended; the task goes on. */
export class FutureTimeout extends Data.TaggedError("FutureTimeout")<{
  readonly runId: string
  readonly timeoutMs: number
}> {
  override get message(): string {
    return `Task ${this.runId} did not end within ${this.timeoutMs} ms (it goes on)`
  }
}
