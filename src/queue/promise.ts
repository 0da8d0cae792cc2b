/**
 * `createCommandQueue`: the command queue for code that does not use Effect. A thin skin over
 * `CommandQueue.make` (same engine, same rules): one Scope owned by the queue, synchronous
 * refusals of `dispatch`, controls applied before they return (their Promise carries the
 * refusal), an AbortSignal per task, and never an unhandled rejection.
 */
import { Cause, Effect, Exit, Scope } from "effect"
import * as CommandQueue from "./CommandQueue.js"
import { admit, wake } from "./engine/admit.js"
import { cancelTask, selfWait, snapshotUnsafe, waitsForItself } from "./engine/control.js"
import { addListener } from "./engine/end.js"
import { engineOf } from "./engine/Engine.js"
import { checkWaitTimeout } from "./engine/options.js"
import { syncRunningTask } from "./engine/run.js"
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
import { PROMISE_BODY, Task, unknownLane, WAKE } from "./engine/state.js"
import { FutureTimeout, RequestError } from "./errors.js"
import { TaskHandle } from "./Future.js"
import { setLongTimeout } from "./longTimer.js"
import type { Admission, CommandQueueOptions, DrainReport, GroupSnapshot, LaneLimits, LaneSnapshot } from "./types.js"

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

/** What `poll()` sees. */
export type AsyncPoll<A> =
  | { readonly status: "pending" }
  | { readonly status: "success"; readonly value: A }
  | { readonly status: "failure"; readonly error: unknown }

/** The future of a Promise-API task. */
export interface AsyncFuture<A> {
  readonly runId: string
  readonly lane: string
  readonly key: string
  readonly generation: number
  readonly admission: Admission
  /** Resolves with the task's value; rejects with what it threw, or a `QueueFailure`. Never an unhandled rejection. */
  readonly result: Promise<A>
  /** The outcome if settled; never waits. */
  poll(): AsyncPoll<A>
  /** As `result`, but rejects `FutureTimeout` after `timeoutMs`; the task goes on. */
  wait(timeoutMs: number): Promise<A>
  /** Drops the task if it waits, aborts it if it runs; resolves once it ended. An ended task keeps its outcome. */
  cancel(): Promise<void>
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

const noop = () => {}
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

// One executor for every `result` Promise: it hands the resolvers over through these two
// variables (read right after `new Promise` returns), so no closure is made per task.
let lastResolve: ((a: unknown) => void) | undefined
let lastReject: ((e: unknown) => void) | undefined
const takeResolvers = (resolve: (a: any) => void, reject: (e: unknown) => void): void => {
  lastResolve = resolve
  lastReject = reject
}
const PENDING: AsyncPoll<never> = { status: "pending" }

/** What a rejected `result` carries: the task's own error or throw, a `QueueFailure`, or a defect. */
const errorOf = (cause: Cause.Cause<unknown>): unknown => Cause.squash(cause)

/** Runs an Effect; rejects with its error itself (not a wrapper). */
const run = <A, E>(effect: Effect.Effect<A, E>): Promise<A> =>
  Effect.runPromiseExit(effect).then((
    exit
  ) => (Exit.isSuccess(exit) ? exit.value : Promise.reject(errorOf(exit.cause))))

class AsyncFutureImpl<A> extends TaskHandle implements AsyncFuture<A> {
  private _result: Promise<A> | undefined = undefined
  private _resolve: ((a: A) => void) | undefined = undefined
  private _reject: ((e: unknown) => void) | undefined = undefined
  constructor(task: Task, admission: Admission, private readonly engine: EngineState) {
    super(task, admission)
  }
  get result(): Promise<A> {
    // Read from inside a task of the same lane and key, before its first await: it would wait for itself.
    if (this.task.exit === undefined && waitsForItself(syncRunningTask(), this.task)) {
      const rejected = Promise.reject(selfWait(this.task))
      rejected.catch(noop)
      return rejected
    }
    if (this._result === undefined) {
      const exit = this.task.exit
      if (exit !== undefined) {
        this._result = Exit.isSuccess(exit) ? Promise.resolve(exit.value as A) : Promise.reject(errorOf(exit.cause))
        this._result.catch(noop)
      } else {
        this._result = new Promise<A>(takeResolvers)
        this._resolve = lastResolve as (a: A) => void
        this._reject = lastReject
        addListener(this.task, this)
      }
    }
    return this._result
  }
  /** Called by the engine when the task settles. */
  settled(exit: Exit.Exit<unknown, unknown>): void {
    if (Exit.isSuccess(exit)) {
      this._resolve!(exit.value as A)
    } else {
      // Handled before it rejects: a result nobody awaits never raises an unhandled rejection.
      this._result!.catch(noop)
      this._reject!(errorOf(exit.cause))
    }
    this._resolve = undefined
    this._reject = undefined
  }
  poll(): AsyncPoll<A> {
    const exit = this.task.exit
    if (exit === undefined) return PENDING
    return Exit.isSuccess(exit)
      ? { status: "success", value: exit.value as A }
      : { status: "failure", error: errorOf(exit.cause) }
  }
  wait(timeoutMs: number): Promise<A> {
    const bad = checkWaitTimeout(timeoutMs)
    if (bad !== undefined) {
      const rejected = Promise.reject(new RequestError({ lane: this.lane, key: this.key, message: bad }))
      rejected.catch(noop)
      return rejected
    }
    const result = this.result
    const p = new Promise<A>((resolve, reject) => {
      // Chained: a plain setTimeout over 2^31−1 ms would fire after 1 ms.
      const timer = setLongTimeout(() => reject(new FutureTimeout({ runId: this.runId, timeoutMs })), timeoutMs)
      result.then(
        (value) => {
          timer.clear()
          resolve(value)
        },
        (error) => {
          timer.clear()
          reject(error)
        }
      )
    })
    p.catch(noop)
    return p
  }
  cancel(): Promise<void> {
    return run(cancelTask(this.engine, this.task))
  }
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
    const aborted = signal instanceof AbortSignal && signal.aborted
    const admitted = admit(engine, lane, key, task, PROMISE_BODY, options, undefined, aborted)
    if (!(admitted instanceof Task)) throw admitted
    const admission = engine.admission === WAKE ? wake(engine, admitted) : engine.admission
    if (typeof admission !== "string") throw admission
    const future = new AsyncFutureImpl<A>(admitted, admission, engine)
    if (signal instanceof AbortSignal && !aborted && admitted.exit === undefined) {
      const onAbort = () => {
        Effect.runFork(cancelTask(engine, admitted))
      }
      signal.addEventListener("abort", onAbort, { once: true })
      addListener(admitted, () => signal.removeEventListener("abort", onAbort))
    }
    return future
  }
  restartLane(lane: string): Promise<number> {
    return run(this.queue.restartLane(lane))
  }
  restartAll(): Promise<void> {
    return run(this.queue.restartAll)
  }
  generation(lane: string): number {
    const l = this.engine.byName.get(lane)
    if (l === undefined) throw unknownLane(this.engine, lane, "")
    return l.generation
  }
  cancel(lane: string, key: string): Promise<void> {
    return run(this.queue.cancel(lane, key))
  }
  snapshot(): ReadonlyArray<LaneSnapshot> {
    return snapshotUnsafe(this.engine)
  }
  drain(options?: { readonly timeoutMs?: number }): Promise<DrainReport> {
    return run(this.queue.drain(options))
  }
  waitForIdle(options?: { readonly lane?: string; readonly timeoutMs?: number }): Promise<{ readonly idle: boolean }> {
    return run(this.queue.waitForIdle(options))
  }
  clear(lane: string): Promise<number> {
    return run(this.queue.clear(lane))
  }
  close(): Promise<void> {
    return (this._closing ??= run(Scope.close(this.scope, Exit.void)))
  }
  addLane(name: string, limits: LaneLimits): Promise<void> {
    return applied(addLaneUnsafe(this.engine, name, limits))
  }
  removeLane(name: string, options?: { readonly timeoutMs?: number }): Promise<DrainReport> {
    return run(this.queue.removeLane(name, options))
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
