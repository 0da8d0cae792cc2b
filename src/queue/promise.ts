/**
 * `createCommandQueue`: the command queue for code that does not use Effect. A thin skin over
 * `CommandQueue.make` (same engine, same rules): one Scope owned by the queue, synchronous
 * refusals of `dispatch`, controls applied before they return (their Promise carries the
 * refusal), an AbortSignal per task, and never an unhandled rejection.
 */
import { Effect, Exit, Scope } from "effect"
import { AsyncTask, CoalescedFuture, errorOf, noop, runPromise } from "./asyncTask.js"
import type { AsyncFuture } from "./asyncTask.js"
export type { AsyncFuture, AsyncPoll } from "./asyncTask.js"
import * as CommandQueue from "./CommandQueue.js"
import { admit, wake } from "./engine/admit.js"
import { cancelTask, snapshotUnsafe } from "./engine/control.js"
import { addListener } from "./engine/end.js"
import { engineOf } from "./engine/Engine.js"
import type { TaskControl } from "./engine/run.js"
export type { TaskControl } from "./engine/run.js"
import {
  addLaneUnsafe,
  groupSnapshotUnsafe,
  setGroupLimitsUnsafe,
  setLimitsUnsafe,
  setPausedUnsafe
} from "./engine/runtime.js"
import type { EngineState } from "./engine/state.js"
import { PROMISE_BODY, unknownLane, WAKE } from "./engine/state.js"
import type { AdmissionError, RequestError } from "./errors.js"
import type { CommandQueueOptions, DrainReport, GroupSnapshot, LaneLimits, LaneSnapshot } from "./types.js"

/** The options of one Promise-API dispatch. */
export interface AsyncDispatchOptions {
  /** Join a task of this key that waits and has not started, instead of adding one. */
  readonly coalesce?: boolean
  readonly queueTimeoutMs?: number
  readonly turnTimeoutMs?: number
  /** Higher starts first (default 0), with aging: see `DispatchOptions.priority`. */
  readonly priority?: number
  /** Aborting it cancels the task as `cancel()` does; already aborted: the future fails `canceled` at once. */
  readonly signal?: AbortSignal
}

/** The command queue for Promise code; see `CommandQueue.CommandQueue` for each rule. */
export interface AsyncCommandQueue {
  /**
   * Admits `task`, or throws `AdmissionError` / `RequestError` synchronously. `task` gets an
   * AbortSignal aborted (with the `QueueFailure` as reason) when the queue stops it, and a
   * `TaskControl` (`task.keepAlive()` restarts its `turnTimeoutMs` from now).
   */
  dispatch<A>(
    lane: string,
    key: string,
    task: (signal: AbortSignal, task: TaskControl) => A | Promise<A>,
    options?: AsyncDispatchOptions
  ): AsyncFuture<A>
  restartLane(lane: string): Promise<number>
  restartAll(): Promise<void>
  /** Throws `RequestError` for an unknown lane. */
  generation(lane: string): number
  cancel(lane: string, key: string): Promise<void>
  snapshot(): ReadonlyArray<LaneSnapshot>
  drain(options?: { readonly timeoutMs?: number }): Promise<DrainReport>
  /** Resolves `{ idle: true }` once the lane (or every lane) holds no task, `{ idle: false }` at the deadline; admission stays open. */
  waitForIdle(options?: { readonly lane?: string; readonly timeoutMs?: number }): Promise<{ readonly idle: boolean }>
  /** Fails every waiting task of `lane` `canceled` (running ones go on); resolves how many it dropped. */
  clear(lane: string): Promise<number>
  /** Drains with the default deadline, then releases everything. Idempotent. */
  close(): Promise<void>
  /**
   * Adds a lane before it returns (a dispatch right after needs no await); the Promise rejects
   * `RequestError` if the name is taken or a limit is bad.
   */
  addLane(name: string, limits: LaneLimits): Promise<void>
  /** Closes the lane's admission, lets its tasks end until the deadline, fails the rest `closed`, forgets it. */
  removeLane(name: string, options?: { readonly timeoutMs?: number }): Promise<DrainReport>
  /** Changes the lane's limits before it returns; rejects `RequestError` when one is bad or the lane unknown. */
  setLimits(lane: string, limits: Partial<LaneLimits>): Promise<void>
  /** Starts nothing more in the lane from the call on (admission stays open); rejects `RequestError` for an unknown lane. */
  pause(lane: string): Promise<void>
  /** Starts what waits in the lane before it returns, longest waiter first; rejects `RequestError` for an unknown lane. */
  resume(lane: string): Promise<void>
  /** One `{ group, concurrent, running, waiting }` per capacity group; never waits. */
  groupSnapshot(): ReadonlyArray<GroupSnapshot>
  /** Changes a group's budget before it returns; rejects `RequestError` for an unknown group or a bad number. */
  setGroupLimits(group: string, limits: { readonly concurrent: number }): Promise<void>
}

const DONE: Promise<void> = Promise.resolve()

/**
 * The Promise of a control already applied: resolved, or rejected with its refusal. The rejection
 * is marked handled, so a call nobody awaits never raises an unhandled rejection.
 */
const applied = (error: RequestError | undefined): Promise<void> => {
  if (error === undefined) return DONE
  const rejected = Promise.reject(error)
  rejected.catch(noop)
  return rejected
}

class AsyncQueue implements AsyncCommandQueue {
  private _closing: Promise<void> | undefined = undefined
  constructor(
    private readonly queue: CommandQueue.CommandQueue,
    private readonly engine: EngineState,
    private readonly scope: Scope.Closeable
  ) {}

  dispatch<A>(
    lane: string,
    key: string,
    task: (signal: AbortSignal, task: TaskControl) => A | Promise<A>,
    options?: AsyncDispatchOptions
  ): AsyncFuture<A> {
    const engine = this.engine
    const signal = options?.signal
    const aborted = signal !== undefined && signal instanceof AbortSignal && signal.aborted
    const admitted = admit(engine, lane, key, task, PROMISE_BODY, AsyncTask, options, undefined, aborted)
    if (!(admitted instanceof AsyncTask)) throw admitted as AdmissionError | RequestError
    const how = engine.admission
    let future: AsyncFuture<A>
    if (how === "coalesced") future = new CoalescedFuture<A>(admitted as AsyncTask<A>)
    else {
      const admission = how === WAKE ? wake(engine, admitted) : how
      if (typeof admission !== "string") throw admission
      // The task is its own future (one object per waiting task).
      admitted.admission = admission
      future = admitted as AsyncTask<A>
    }
    if (signal !== undefined && signal instanceof AbortSignal && !aborted && admitted.exit === undefined) {
      const onAbort = () => {
        Effect.runFork(cancelTask(engine, admitted))
      }
      signal.addEventListener("abort", onAbort, { once: true })
      addListener(admitted, () => signal.removeEventListener("abort", onAbort))
    }
    return future
  }
  restartLane(lane: string): Promise<number> {
    return runPromise(this.queue.restartLane(lane))
  }
  restartAll(): Promise<void> {
    return runPromise(this.queue.restartAll)
  }
  generation(lane: string): number {
    const l = this.engine.byName.get(lane)
    if (l === undefined) throw unknownLane(this.engine, lane, "")
    return l.generation
  }
  cancel(lane: string, key: string): Promise<void> {
    return runPromise(this.queue.cancel(lane, key))
  }
  snapshot(): ReadonlyArray<LaneSnapshot> {
    return snapshotUnsafe(this.engine)
  }
  drain(options?: { readonly timeoutMs?: number }): Promise<DrainReport> {
    return runPromise(this.queue.drain(options))
  }
  waitForIdle(options?: { readonly lane?: string; readonly timeoutMs?: number }): Promise<{ readonly idle: boolean }> {
    return runPromise(this.queue.waitForIdle(options))
  }
  clear(lane: string): Promise<number> {
    return runPromise(this.queue.clear(lane))
  }
  close(): Promise<void> {
    return (this._closing ??= runPromise(Scope.close(this.scope, Exit.void)))
  }
  addLane(name: string, limits: LaneLimits): Promise<void> {
    return applied(addLaneUnsafe(this.engine, name, limits))
  }
  removeLane(name: string, options?: { readonly timeoutMs?: number }): Promise<DrainReport> {
    return runPromise(this.queue.removeLane(name, options))
  }
  setLimits(lane: string, limits: Partial<LaneLimits>): Promise<void> {
    return applied(setLimitsUnsafe(this.engine, lane, limits))
  }
  pause(lane: string): Promise<void> {
    return applied(setPausedUnsafe(this.engine, lane, true))
  }
  resume(lane: string): Promise<void> {
    return applied(setPausedUnsafe(this.engine, lane, false))
  }
  groupSnapshot(): ReadonlyArray<GroupSnapshot> {
    return groupSnapshotUnsafe(this.engine)
  }
  setGroupLimits(group: string, limits: { readonly concurrent: number }): Promise<void> {
    return applied(setGroupLimitsUnsafe(this.engine, group, limits))
  }
}

/**
 * Makes a command queue for Promise code (same options as `CommandQueue.make`); rejects with
 * `LanesConfigInvalid` when a limit is bad. Call `close()` to drain it and release everything.
 */
export const createCommandQueue = async (options?: CommandQueueOptions): Promise<AsyncCommandQueue> => {
  const scope = Scope.makeUnsafe()
  const exit = await Effect.runPromiseExit(Scope.provide(scope)(CommandQueue.make(options)))
  if (Exit.isFailure(exit)) {
    await Effect.runPromise(Scope.close(scope, exit))
    throw errorOf(exit.cause)
  }
  return new AsyncQueue(exit.value, engineOf(exit.value), scope)
}
