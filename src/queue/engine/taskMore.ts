/**
 * What a task's fields say, below the task itself: its life-cycle states, the kinds of body, the
 * per-dispatch options it keeps, and the fields few tasks need (`TaskMore`). Internal to
 * `src/queue` (part of the engine; below `state.ts`, which re-exports these names).
 */
import type { Deferred, Effect, Exit, Fiber } from "effect"
import type { QueueFailure } from "../errors.js"

/** A task waits in its key's FIFO. */
export const WAITING = 0
/** Its body runs. */
export const RUNNING = 1
/** Its body ended; the finalizer and the report run. */
export const FINISHING = 2
/** Dropped before it started; the finalizer and the report run. */
export const DROPPING = 3
/** Settled: its exit is known and its future completed. */
export const ENDED = 4
export type TaskState = typeof WAITING | typeof RUNNING | typeof FINISHING | typeof DROPPING | typeof ENDED

/** `Task.waitTimer` once `onWait` was called for the task while it waited. */
export const WAIT_NOTIFIED = 1

/** The body is an Effect (Effect API) or a function of an AbortSignal (Promise API). */
export const EFFECT_BODY = 0
export const PROMISE_BODY = 1
export type BodyKind = typeof EFFECT_BODY | typeof PROMISE_BODY

/** The per-dispatch options a task keeps (only when given). */
export interface TaskOptions {
  readonly coalesce?: boolean | undefined
  readonly queueTimeoutMs?: number | undefined
  readonly turnTimeoutMs?: number | undefined
  readonly finalizer?: ((exit: Exit.Exit<any, any>) => Effect.Effect<void, unknown>) | undefined
  readonly priority?: number | undefined
}

/** Called when the task settles (abort-signal clean-up of the Promise API). */
export type Listener = (exit: Exit.Exit<unknown, unknown>) => void

/**
 * What few tasks need: set only when one of them is (a timeout, `onWait`, a stop, an AbortSignal, a
 * settle listener), so that a waiting task without them is small (issue 12: heap per waiting task).
 */
export class TaskMore {
  /** Why the queue stopped it (also its future's failure and its AbortSignal's reason). */
  stopped: QueueFailure | undefined = undefined
  /** The queue-timeout timer while it waits, the turn-timeout (or abort-grace) timer while it runs. */
  timer: Fiber.Fiber<unknown, unknown> | undefined = undefined
  /** The `onWait` timer while it waits (`watch.ts`); `WAIT_NOTIFIED` once `onWait` was called for it. */
  waitTimer: Fiber.Fiber<unknown, unknown> | typeof WAIT_NOTIFIED | undefined = undefined
  /** Its turn timeout while it runs, if any (what `keepAlive` restarts). */
  turnMs: number | undefined = undefined
  /** While it runs with a turn timeout: the deadline the last `keepAlive` set, -1 when none since the turn timer last looked. */
  deadline = -1
  /** A Promise body's AbortSignal, when the function can see one. */
  controller: AbortController | undefined = undefined
  listeners: Listener | Array<Listener> | undefined = undefined
  /** A Promise-API task's Deferred (see `Task.deferred`). */
  deferred: Deferred.Deferred<any, any> | undefined = undefined
}

/** Stops the task's queue-timeout or turn-timeout timer, if one runs. */
export const stopTimer = (more: TaskMore): void => {
  const timer = more.timer
  if (timer !== undefined) {
    more.timer = undefined
    timer.interruptUnsafe()
  }
}
