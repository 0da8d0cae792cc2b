/**
 * The handle `dispatch` returns: backed by a Deferred that the queue completes exactly once,
 * after the task's finalizer and report. Awaiting it never affects the task.
 */
import type { Duration, Effect, Exit, Option } from "effect"
import { awaitTask, awaitTaskTimeout, cancelTask, pollTask } from "./engine/control.js"
import type { Task } from "./engine/state.js"
import type { FutureTimeout, QueueFailure, RequestError } from "./errors.js"
import type { Admission, Future } from "./types.js"

export type { Admission, Future } from "./types.js"

/** @internal The fields every handle of a task shows (the Effect future and the Promise one). */
export class TaskHandle {
  constructor(readonly task: Task, readonly admission: Admission) {}
  get runId(): string {
    return this.task.runId
  }
  get lane(): string {
    return this.task.laneState.name
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
  get await(): Effect.Effect<A, E | QueueFailure | RequestError> {
    return awaitTask(this.task)
  }
  get poll(): Effect.Effect<Option.Option<Exit.Exit<A, E | QueueFailure>>> {
    return pollTask(this.task)
  }
  get awaitTimeout(): (timeout: Duration.Input) => Effect.Effect<A, E | QueueFailure | FutureTimeout | RequestError> {
    return (timeout) => awaitTaskTimeout(this.task, timeout)
  }
  get cancel(): Effect.Effect<void> {
    return cancelTask(this.task.laneState.engine, this.task)
  }
  toJSON(): unknown {
    return {
      _id: "Future",
      runId: this.runId,
      lane: this.lane,
      key: this.key,
      generation: this.generation,
      admission: this.admission
    }
  }
}
