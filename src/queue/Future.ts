/**
 * The handle `dispatch` returns: backed by a Deferred that the queue completes exactly once,
 * after the task's finalizer and report. Awaiting it never affects the task.
 */
import type { Duration, Effect, Exit, Option } from "effect"
import type { FutureTimeout, QueueFailure } from "./errors.js"
import type { Task } from "./lane.js"

/** How a dispatch was admitted: its task began at once, waits, or joined a waiting task. */
export type Admission = "started" | "queued" | "coalesced"

/** The future of one dispatched task. */
export interface Future<A, E> {
  /** Unique within the process; a coalesced future carries the joined task's runId. */
  readonly runId: string
  readonly lane: string
  readonly key: string
  /** The lane's generation at admission. */
  readonly generation: number
  readonly admission: Admission
  /** The task's value, its own failure unchanged, or a `QueueFailure`; a defect stays a defect. Interrupting the awaiting fiber never cancels the task. */
  readonly await: Effect.Effect<A, E | QueueFailure>
  /** The outcome if the task has settled; never waits. */
  readonly poll: Effect.Effect<Option.Option<Exit.Exit<A, E | QueueFailure>>>
  /** As `await`, but fails `FutureTimeout` when the deadline passes first; the task goes on. */
  readonly awaitTimeout: (timeout: Duration.Input) => Effect.Effect<A, E | QueueFailure | FutureTimeout>
  /** Drops the task if it waits, interrupts it if it runs; returns once it ended. A task that ended keeps its outcome. */
  readonly cancel: Effect.Effect<void>
}

/** What a future needs from the queue's engine. @internal */
export interface FutureOps {
  readonly awaitTask: (task: Task) => Effect.Effect<any, any>
  readonly pollTask: (task: Task) => Effect.Effect<Option.Option<Exit.Exit<any, any>>>
  readonly awaitTaskTimeout: (task: Task, timeout: Duration.Input) => Effect.Effect<any, any>
  readonly cancelTask: (task: Task) => Effect.Effect<void>
}

/** @internal The fields every handle of a task shows (the Effect future and the Promise one). */
export class TaskHandle {
  constructor(readonly task: Task, readonly admission: Admission) {}
  get runId(): string {
    return this.task.runId
  }
  get lane(): string {
    return this.task.lane.name
  }
  get key(): string {
    return this.task.key
  }
  get generation(): number {
    return this.task.generation
  }
}

/** @internal */
export class FutureImpl<A, E> extends TaskHandle implements Future<A, E> {
  constructor(task: Task, admission: Admission, private readonly ops: FutureOps) {
    super(task, admission)
  }
  get await(): Effect.Effect<A, E | QueueFailure> {
    return this.ops.awaitTask(this.task)
  }
  get poll(): Effect.Effect<Option.Option<Exit.Exit<A, E | QueueFailure>>> {
    return this.ops.pollTask(this.task)
  }
  get awaitTimeout(): (timeout: Duration.Input) => Effect.Effect<A, E | QueueFailure | FutureTimeout> {
    return (timeout) => this.ops.awaitTaskTimeout(this.task, timeout)
  }
  get cancel(): Effect.Effect<void> {
    return this.ops.cancelTask(this.task)
  }
  toJSON(): unknown {
    return { _id: "Future", runId: this.runId, lane: this.lane, key: this.key, generation: this.generation, admission: this.admission }
  }
}
