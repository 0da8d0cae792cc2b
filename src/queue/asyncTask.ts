/**
 * The Promise API's future: the task itself (`AsyncTask`), so that a waiting task and the handle its
 * caller holds are one object (issue 12: heap per waiting task); a coalesced dispatch gets a small
 * view of the task it joined (`CoalescedFuture`). Its `result` Promise is made when first read.
 * Internal to `src/queue` (the types are exported through `promise.ts`).
 */
import { Cause, Effect, Exit } from "effect"
import { cancelTask, selfWait, waitsForItself } from "./engine/control.js"
import { checkWaitTimeout } from "./engine/options.js"
import { syncRunningTask } from "./engine/run.js"
import { PromiseBodyTask } from "./engine/state.js"
import type { LaneState, TaskOptions } from "./engine/state.js"
import { FutureTimeout, RequestError } from "./errors.js"
import { setLongTimeout } from "./longTimer.js"
import type { Admission } from "./types.js"

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

export const noop = (): void => {}

/** What a rejected `result` carries: the task's own error or throw, a `QueueFailure`, or a defect. */
export const errorOf = (cause: Cause.Cause<unknown>): unknown => Cause.squash(cause)

/** Runs an Effect; rejects with its error itself (not a wrapper). */
export const runPromise = <A, E>(effect: Effect.Effect<A, E>): Promise<A> =>
  Effect.runPromiseExit(effect).then((
    exit
  ) => (Exit.isSuccess(exit) ? exit.value : Promise.reject(errorOf(exit.cause))))

/** A rejected Promise that is handled already (never an unhandled rejection). */
const rejected = <A>(error: unknown): Promise<A> => {
  const p = Promise.reject(error)
  p.catch(noop)
  return p
}

// One executor for every `result` Promise: it hands the resolver over through this variable (read
// right after `new Promise` returns), so no closure of our own is made per task.
let lastResolve: ((a: unknown) => void) | undefined
const takeResolve = (resolve: (a: any) => void): void => {
  lastResolve = resolve
}
const PENDING: AsyncPoll<never> = { status: "pending" }

/** One Promise-API task, and the future its dispatch returns. */
export class AsyncTask<A = unknown> extends PromiseBodyTask implements AsyncFuture<A> {
  admission: Admission = "queued"
  private _result: Promise<A> | undefined = undefined
  /**
   * Settles `_result` while it is pending: only its resolve function is kept (a failure resolves it
   * with a rejected promise, which it adopts), half the closures of a pair.
   */
  private _resolve: ((a: unknown) => void) | undefined = undefined

  // Spelled out, as `PromiseBodyTask`'s (an implicit one forwards through a generic builtin).
  constructor(
    seq: number,
    laneState: LaneState,
    key: string,
    generation: number,
    body: unknown,
    admittedAt: number,
    options: TaskOptions | undefined
  ) {
    super(seq, laneState, key, generation, body, admittedAt, options)
  }

  get lane(): string {
    return this.laneState.name
  }

  get result(): Promise<A> {
    // Read from inside a task of the same lane and key, before its first await: it would wait for itself.
    if (this.exit === undefined && waitsForItself(syncRunningTask(), this)) return rejected(selfWait(this))
    let result = this._result
    if (result === undefined) {
      const exit = this.exit
      if (exit !== undefined) {
        result = Exit.isSuccess(exit) ? Promise.resolve(exit.value as A) : rejected<A>(errorOf(exit.cause))
      } else {
        result = new Promise<A>(takeResolve)
        this._resolve = lastResolve
        lastResolve = undefined
      }
      this._result = result
    }
    return result
  }

  /** The engine settled the task: its `result`, if someone read it, settles now. */
  override onSettled(exit: Exit.Exit<unknown, unknown>): void {
    const resolve = this._resolve
    if (resolve === undefined) return
    this._resolve = undefined
    if (Exit.isSuccess(exit)) resolve(exit.value)
    else {
      // Handled before it rejects: a result nobody awaits never raises an unhandled rejection.
      this._result!.catch(noop)
      resolve(rejected(errorOf(exit.cause)))
    }
  }

  poll(): AsyncPoll<A> {
    const exit = this.exit
    if (exit === undefined) return PENDING
    return Exit.isSuccess(exit)
      ? { status: "success", value: exit.value as A }
      : { status: "failure", error: errorOf(exit.cause) }
  }

  wait(timeoutMs: number): Promise<A> {
    const bad = checkWaitTimeout(timeoutMs)
    if (bad !== undefined) return rejected(new RequestError({ lane: this.lane, key: this.key, message: bad }))
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
    return runPromise(cancelTask(this.laneState.engine, this))
  }

  toJSON(): unknown {
    return {
      _id: "AsyncFuture",
      runId: this.runId,
      lane: this.lane,
      key: this.key,
      generation: this.generation,
      admission: this.admission
    }
  }
}

/** The future of a dispatch that joined a waiting task (`coalesce: true`): that task's, seen as coalesced. */
export class CoalescedFuture<A> implements AsyncFuture<A> {
  readonly admission: Admission = "coalesced"
  constructor(private readonly task: AsyncTask<A>) {}
  get runId(): string {
    return this.task.runId
  }
  get lane(): string {
    return this.task.lane
  }
  get key(): string {
    return this.task.key
  }
  get generation(): number {
    return this.task.generation
  }
  get result(): Promise<A> {
    return this.task.result
  }
  poll(): AsyncPoll<A> {
    return this.task.poll()
  }
  wait(timeoutMs: number): Promise<A> {
    return this.task.wait(timeoutMs)
  }
  cancel(): Promise<void> {
    return this.task.cancel()
  }
  toJSON(): unknown {
    return { ...(this.task.toJSON() as object), admission: this.admission }
  }
}
