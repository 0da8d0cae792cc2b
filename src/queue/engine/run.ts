/**
 * One activation runs one task: the key's next task is picked when the lanes give the key its
 * slot, then its body runs inside the activation: an Effect body in a fiber of its own (so that it
 * can be interrupted alone), a Promise body with its AbortSignal; and stopping a running task.
 * Internal to `src/queue` (part of the engine; below it: `end.ts`, `state.ts`).
 */
import { Context, Effect, Exit, Fiber } from "effect"
import type { QueueFailureReason } from "../errors.js"
import { PENDING } from "../lanes/entry.js"
import type { Entry } from "../lanes/entry.js"
import { finish, VOID } from "./end.js"
import type { EffectTask, EngineState, KeyTasks, LaneState, PromiseBodyTask, Task } from "./state.js"
import {
  CurrentTask,
  EFFECT_BODY,
  failureOf,
  KeyMore,
  moreOf,
  RESUME_INLINE,
  RUNNING,
  stoppedOf,
  stopTimer
} from "./state.js"
import { waitStarted } from "./watch.js"

/**
 * What `createLanes` calls when the key gets its slot: the key's next task starts now (it runs,
 * as `snapshot` and `admission: "started"` say, from here on); its body runs when the
 * activation's fiber does, right after.
 */
export function activator(engine: EngineState, lane: LaneState): (key: string) => Effect.Effect<void> {
  return (key) => activation(engine, lane, lane.keys.get(key))
}

/** `activator`, given the key's entry (a `KeyTasks`, the lanes' entry of the key: no lookup). */
export function entryActivator(engine: EngineState, lane: LaneState): (e: Entry<string>) => Effect.Effect<void> {
  return (e) => activation(engine, lane, e as KeyTasks)
}

function activation(engine: EngineState, lane: LaneState, ks: KeyTasks | undefined): Effect.Effect<void> {
  const task = pick(engine, lane, ks)
  // The task is the activation's work (an InlineWork: `run` when its turn comes, as plain
  // code; a fiber only for what does not end synchronously). The lanes run it
  // uninterruptibly: a task's end always runs; the engine stops tasks itself.
  return task === undefined ? VOID : (task as unknown as Effect.Effect<void>)
}

/** Takes the key's next task off its FIFO and makes it the running one (synchronously). */
export function pick(engine: EngineState, lane: LaneState, ks: KeyTasks | undefined): Task | undefined {
  // A key whose owed activation is being cancelled, or that has nothing left: nothing to do.
  if (ks === undefined || ks.cancelling || ks.running !== undefined) return undefined
  const task = ks.head
  if (task === undefined) return undefined
  ks.unlink(task)
  ks.running = task
  task.state = RUNNING
  lane.waiting--
  lane.running++
  const now = engine.now()
  task.startedAt = now
  lane.metrics.waited(now - task.admittedAt)
  const more = task.more
  if (more !== undefined) {
    stopTimer(more)
    if (more.waitTimer !== undefined) waitStarted(engine, task)
  }
  return task
}

const noop = (): void => {}

/** `function name() {` with an empty parameter list (also async, generator). */
const EMPTY_FUNCTION = /^(?:async\s*)?function\s*\*?\s*[\w$]*\s*\(\s*\)/

/**
 * Whether `fn` can see the argument it is called with, so needs an AbortSignal of its own (making
 * one costs about 4 µs, several times the rest of a task). `fn.length` alone is wrong: it is 0 for
 * `(...args) => …` and default parameters, which do see it (they got one shared signal that never
 * aborted and gathered every task's listeners). Only two shapes are known blind: an arrow whose
 * source starts with `()` (arrows have no `arguments`), and a `function` with an empty parameter
 * list whose source never says `arguments`. Anything else (bound and native functions, methods,
 * odd spacing) gets a signal.
 */
export const mayReadSignal = (fn: (...args: ReadonlyArray<never>) => unknown): boolean => {
  if (fn.length > 0) return true
  const src = Function.prototype.toString.call(fn)
  const c0 = src.charCodeAt(0)
  // "(" ")": an arrow with no parameters.
  if (c0 === 40) return src.charCodeAt(1) !== 41
  if (c0 === 97 && (src.startsWith("async ()") || src.startsWith("async()"))) return false
  // Bound and native functions print `function () { [native code] }` whatever they forward.
  return !(EMPTY_FUNCTION.test(src) && !src.includes("arguments") && !src.includes("[native code]"))
}

const isThenable = (u: unknown): u is PromiseLike<unknown> =>
  typeof u === "object" && u !== null && typeof (u as { then?: unknown }).then === "function"

// compared by identity only (never called detached)
// eslint-disable-next-line @typescript-eslint/unbound-method
const promiseThen = Promise.prototype.then

/**
 * A fiber that stops the task `timeout` once its `deadline` passed (interrupted when the task ends
 * first). `keepAlive` moves the deadline; the fiber sleeps again until the new one.
 */
export function turnTimer(engine: EngineState, task: Task): Fiber.Fiber<void> {
  const more = moreOf(task)
  const check: Effect.Effect<void> = Effect.suspend(() => {
    // -1: not renewed since the last check (no clock read: the timer alone decides, as without keepAlive)
    const deadline = more.deadline
    more.deadline = -1
    const left = deadline < 0 ? 0 : deadline - engine.now()
    if (left > 0) return Effect.andThen(Effect.sleep(left), check)
    stop(engine, task, "timeout")
    return Effect.void
  })
  return engine.fork(Effect.andThen(Effect.sleep(more.turnMs!), check))
}

/** Restarts the running task's turn timeout from now (nothing when it has none or does not run). */
export function keepAlive(engine: EngineState, task: Task): void {
  const more = task.more
  if (task.state !== RUNNING || more?.turnMs === undefined || more.stopped !== undefined) return
  more.deadline = engine.now() + more.turnMs
}

/** What a Promise task receives as its second argument. */
export interface TaskControl {
  readonly runId: string
  readonly lane: string
  readonly key: string
  /** Restarts the task's `turnTimeoutMs` from now (as `CommandQueue.keepAlive` does for an Effect task). */
  keepAlive(): void
}

class TaskControlImpl implements TaskControl {
  constructor(private readonly task: Task) {}
  get runId(): string {
    return this.task.runId
  }
  get lane(): string {
    return this.task.laneState.name
  }
  get key(): string {
    return this.task.key
  }
  keepAlive(): void {
    keepAlive(this.task.laneState.engine, this.task)
  }
}

/**
 * The Promise task whose function runs synchronously right now (its call, up to its first
 * `await`): what the Promise API's "would wait for itself" check can see.
 */
let syncRunning: Task | undefined = undefined

/** The Promise task whose function runs synchronously right now, if any. */
export const syncRunningTask = (): Task | undefined => syncRunning

/** Forks the body in the caller's context; its exit if it ended synchronously, else an Effect of it. */
export function startEffect(
  engine: EngineState,
  task: EffectTask,
  turnMs: number | undefined,
  inline: boolean
): Exit.Exit<any, any> | Effect.Effect<Exit.Exit<any, any>> | typeof PENDING {
  const body = task.body as Effect.Effect<any, any>
  task.body = undefined
  const fiber = Effect.runForkWith(Context.add(task.context!, CurrentTask, task))(body)
  task.handle = fiber
  const exit = fiber.pollUnsafe()
  if (exit !== undefined) return exit
  // Stopped while its first synchronous steps ran (they woke a fiber that cancelled it, say).
  if (stoppedOf(task) !== undefined) {
    fiber.interruptUnsafe()
    const interrupted = fiber.pollUnsafe()
    if (interrupted !== undefined) return interrupted
  } else if (turnMs !== undefined) {
    moreOf(task).timer = turnTimer(engine, task)
  }
  if (inline) {
    // No activation fiber: the body's own fiber ends the task when it exits.
    fiber.addObserver((exit) => resumeInline(engine, task, exit))
    return PENDING
  }
  // Not done: this is a callback, never an Exit (so `runNext` cannot take it for one).
  return Fiber.await(fiber)
}

/**
 * Calls the function with an AbortSignal of its own whenever it can see one (`mayReadSignal`), whatever
 * its arity. Its exit if it returned a plain value or threw, else an Effect of the promise's outcome,
 * or of the queue's stop, whichever is first.
 */
export function startPromise(
  engine: EngineState,
  task: PromiseBodyTask,
  turnMs: number | undefined,
  inline: boolean
): Exit.Exit<any, any> | Effect.Effect<Exit.Exit<any, any>> | typeof PENDING {
  const fn = task.body as (signal: AbortSignal) => unknown
  task.body = undefined
  let out: unknown
  const outer = syncRunning
  syncRunning = task
  try {
    if (mayReadSignal(fn)) {
      const controller = new AbortController()
      moreOf(task).controller = controller
      out = (fn as (signal: AbortSignal, task: TaskControl) => unknown)(controller.signal, new TaskControlImpl(task))
    } else {
      out = (fn as () => unknown)()
    }
  } catch (error) {
    return Exit.fail(error)
  } finally {
    syncRunning = outer
  }
  if (!isThenable(out)) return Exit.succeed(out)
  // Any other thenable is adopted by a native promise, which settles once and never inside `then`: a
  // thenable may call back synchronously (the task would end inside its own start), twice, or throw.
  const promise = out.then === promiseThen ? out : Promise.resolve(out)
  if (inline) {
    // Stopped while the function ran: its late result is dropped (and its rejection handled).
    const stopped = stoppedOf(task)
    if (stopped !== undefined) {
      promise.then(noop, noop)
      return Exit.fail(stopped)
    }
    if (turnMs !== undefined) moreOf(task).timer = turnTimer(engine, task)
    // No fiber: the promise's outcome, or the queue's stop, whichever comes first, ends the task.
    task.resume = RESUME_INLINE
    awaitSettled(task, promise)
    return PENDING
  }
  if (turnMs !== undefined) moreOf(task).timer = turnTimer(engine, task)
  return Effect.callback<Exit.Exit<any, any>>((resume) => {
    task.resume = (exit) => resume(Effect.succeed(exit))
    awaitSettled(task, promise)
    // Stopped before this point: its late result is dropped.
    const stopped = stoppedOf(task)
    if (stopped !== undefined) resumeTask(task, Exit.fail(stopped))
  })
}

/**
 * The two handlers on the promises of one key's Promise tasks (`KeyMore.ok`/`err`), made once per
 * key: a key runs one task at a time, so the one task whose promise has them attached
 * (`KeyMore.task`) is the one they settle. Only a promise with the native `then` gets them (its
 * reactions run once, never synchronously), and only while no other promise of the key still has
 * them (a stopped task's late promise: the next task of its key then gets closures of its own, as
 * a key with one task does).
 */
function watchOf(more: KeyMore): KeyMore {
  more.ok = (value) => {
    const task = more.task!
    more.task = undefined
    if (task.resume !== undefined) resumeTask(task, Exit.succeed(value), true)
  }
  more.err = (error) => {
    const task = more.task!
    more.task = undefined
    if (task.resume !== undefined) resumeTask(task, Exit.fail(error), true)
  }
  return more
}

/** Resumes the task with the promise's outcome: through its key's shared handlers, or two callbacks of its own. */
function awaitSettled(task: PromiseBodyTask, promise: PromiseLike<unknown>): void {
  const ks = task.keyTasks
  // a promise with the native `then` (a method load; `Object.getPrototypeOf` would be a runtime call)
  if (ks !== undefined && promise.then === promiseThen) {
    let more = ks.more
    // made for a key with more tasks to run (a key with one task would pay for them and never reuse them)
    if ((more === undefined || more.ok === undefined) && ks.head !== undefined) {
      more = watchOf(ks.more ??= new KeyMore())
    }
    if (more !== undefined && more.ok !== undefined && more.task === undefined) {
      void (promise as Promise<unknown>).then(more.ok, more.err)
      more.task = task // after: a native `then` never calls them synchronously
      return
    }
  }
  promise.then(
    (value) => {
      if (task.resume !== undefined) resumeTask(task, Exit.succeed(value), true)
    },
    (error) => {
      if (task.resume !== undefined) resumeTask(task, Exit.fail(error), true)
    }
  )
}

/**
 * Settles a Promise body's running stage once (a later call does nothing): with its outcome, or
 * with its stop if the queue stopped it meanwhile (the late result is dropped).
 */
export function resumeTask(task: PromiseBodyTask, exit: Exit.Exit<any, any>, settled?: boolean): void {
  const resume = task.resume
  if (resume === undefined) return
  task.resume = undefined
  const stopped = stoppedOf(task)
  const final = stopped === undefined ? exit : Exit.fail(stopped)
  if (resume === RESUME_INLINE) resumeInline(task.laneState.engine, task, final, settled)
  else resume(final)
}

/**
 * Stops a running task: interrupts its fiber, or aborts its signal and drops its late result. A
 * Promise task keeps its slot up to the lane's `abortGraceMs` after the abort, to clean up.
 */
export function stop(engine: EngineState, task: Task, reason: QueueFailureReason): void {
  if (task.state !== RUNNING || stoppedOf(task) !== undefined) return
  const failure = failureOf(task, "running", reason)
  const more = moreOf(task)
  more.stopped = failure
  if (task.kind === EFFECT_BODY) {
    ;(task as EffectTask).handle?.interruptUnsafe()
    return
  }
  const promiseTask = task as PromiseBodyTask
  more.controller?.abort(failure)
  const grace = task.laneState.limits.abortGraceMs
  if (grace === undefined || promiseTask.resume === undefined) {
    resumeTask(promiseTask, Exit.fail(failure))
    return
  }
  // The promise settling ends the task (as `failure`); else the grace timer does.
  const turn = more.timer
  more.timer = engine.fork(
    Effect.andThen(Effect.sleep(grace), Effect.sync(() => resumeTask(promiseTask, Exit.fail(failure))))
  )
  turn?.interruptUnsafe()
}

/**
 * The activation's work: one warning first if the task waited too long (`warnAfterMs`), then the
 * body, then its end. `VOID` when all of it ended synchronously. `inline`: run as the
 * activation's inline work (no fiber; see `runBody`).
 */
export function runTask(
  engine: EngineState,
  lane: LaneState,
  key: string,
  task: Task,
  inline: boolean
): Effect.Effect<void> {
  const waited = task.startedAt - task.admittedAt
  const warnAfter = lane.limits.warnAfterMs
  if (warnAfter === undefined || waited <= warnAfter || stoppedOf(task) !== undefined) {
    return runBody(engine, lane, key, task, inline)
  }
  return Effect.andThen(
    Effect.logWarning(
      `switchyard: task ${task.runId} waited ${waited} ms to start in lane \`${lane.name}\` (warnAfterMs ${warnAfter})`
    ).pipe(Effect.annotateLogs({ runId: task.runId, lane: lane.name, key, waitedMs: waited })),
    Effect.suspend(() => runBody(engine, lane, key, task, false))
  )
}

/**
 * The body, then its end. `inline`: a body that has not ended returns `PENDING` (no fiber waits
 * for it): its end runs from the promise's callback or the body fiber's observer
 * (`resumeInline`), which then ends the activation.
 */
function runBody(engine: EngineState, lane: LaneState, key: string, task: Task, inline: boolean): Effect.Effect<void> {
  // Stopped (cancel, restart, drain) between its slot and its first step: the body never runs.
  const stopped = stoppedOf(task)
  if (stopped !== undefined) return finish(engine, lane, key, task, Exit.fail(stopped))
  const turnMs = task.options?.turnTimeoutMs ?? lane.limits.turnTimeoutMs
  if (turnMs !== undefined) moreOf(task).turnMs = turnMs
  const body = task.kind === EFFECT_BODY
    ? startEffect(engine, task as EffectTask, turnMs, inline)
    : startPromise(engine, task as PromiseBodyTask, turnMs, inline)
  if (body === PENDING) return PENDING
  // A body that ended synchronously is finished without another step.
  return Exit.isExit(body)
    ? finish(engine, lane, key, task, body)
    : Effect.flatMap(body as Effect.Effect<Exit.Exit<any, any>>, (exit) => finish(engine, lane, key, task, exit))
}

/**
 * A body run inline has ended (or was stopped): its end runs now, then its activation ends (in a
 * fiber, when the end has Effects to run: finalizer, report). Never throws (it runs in a promise
 * callback or a fiber observer).
 */
export function resumeInline(engine: EngineState, task: Task, exit: Exit.Exit<any, any>, startNow?: boolean): void {
  const lane = task.laneState
  const key = task.key
  const ks = task.keyTasks! // a running task's key, held by the lanes until its activation ends
  let rest: Effect.Effect<void>
  try {
    rest = finish(engine, lane, key, task, exit)
  } catch (defect) {
    rest = Effect.die(defect)
  }
  if (rest === VOID) {
    lane.lanes.endInlineEntry(ks, startNow)
    return
  }
  engine.fork(
    Effect.uninterruptible(Effect.ensuring(Effect.ignoreCause(rest), Effect.sync(() => lane.lanes.endInlineEntry(ks))))
  )
}
