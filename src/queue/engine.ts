/**
 * The command queue's engine: one `createLanes` per lane, a FIFO of tasks per key, the task life
 * cycle (wait, run, finalize, report, settle), generations and drain. Internal to `src/queue`:
 * `CommandQueue.make` and `createCommandQueue` are its two skins.
 *
 * All state is plain and mutable, changed synchronously (no Ref round trips on the hot path). A
 * lane activation runs exactly one task of its key, then asks for a follow-up if the key has more,
 * so a busy key queues behind the keys that waited meanwhile (lanes.md fairness).
 */
import { Cause, Clock, Context, Deferred, Duration, Effect, Exit, Fiber, Option } from "effect"
import type { Scope } from "effect"
import type { CommandQueue, DrainReport, LaneSnapshot, TaskReport } from "./CommandQueue.js"
import { AdmissionError, FutureTimeout, QueueFailure, RequestError } from "./errors.js"
import type { QueueFailureReason, QueueFailureStage } from "./errors.js"
import type { Admission, FutureOps } from "./Future.js"
import { FutureImpl } from "./Future.js"
import type { BodyKind, Listener, TaskOptions } from "./lane.js"
import { DROPPING, EFFECT_BODY, ENDED, FINISHING, KeyTasks, LaneState, RUNNING, Task, WAITING } from "./lane.js"
import { createLanes } from "./Lanes.js"
import type { WakeResult } from "./Lanes.js"
import { LaneMetrics } from "./metrics.js"
import type { ResolvedOptions } from "./validate.js"
import { checkDispatchOptions, checkKey, show } from "./validate.js"

/** `admit` left the key idle: the caller must wake it. */
export const WAKE = "wake" as const

/** What a task that declares no parameter gets: it cannot look at a signal, so none is made for it. */
const NO_SIGNAL = new AbortController().signal
/** What a part of a task's end returns when it finished synchronously (compared by identity). */
const VOID: Effect.Effect<void> = Effect.void

let runSeq = 0
/** Unique within the process, cheap: a counter. */
const nextRunId = (): string => `run-${(++runSeq).toString(36)}`

const isThenable = (u: unknown): u is PromiseLike<unknown> =>
  typeof u === "object" && u !== null && typeof (u as { then?: unknown }).then === "function"

/** A finalizer's own failure joins the task's Cause as a defect: it never adds a typed error. */
const asDefects = (cause: Cause.Cause<unknown>): Cause.Cause<never> =>
  Cause.fromReasons(cause.reasons.map((r) => (Cause.isFailReason(r) ? Cause.makeDieReason(r.error) : r))) as Cause.Cause<never>

const callListener = (listener: Listener, exit: Exit.Exit<unknown, unknown>): void => {
  try {
    if (typeof listener === "function") listener(exit)
    else listener.settled(exit)
  } catch {
    // a listener is the queue's own code (Promise futures, signal clean-up); it must not break settling
  }
}

const engines = new WeakMap<object, Engine>()
/** The engine behind a queue made by `CommandQueue.make`. @internal */
export const engineOf = (queue: CommandQueue): Engine => engines.get(queue)!

/** @internal */
export class Engine implements FutureOps {
  readonly byName = new Map<string, LaneState>()
  readonly all: Array<LaneState> = []
  readonly fork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.Fiber<A, E>
  readonly clock: Clock.Clock
  /** Admission is closed. */
  draining = false
  /** The lanes are being closed (end of a drain): dropped keys need no lanes clean-up. */
  closing = false
  drained: Deferred.Deferred<DrainReport> | undefined = undefined
  /** Tasks admitted and not settled, across lanes. */
  live = 0
  /** Completed when `live` reaches 0 (drain waits on it). */
  idle: Deferred.Deferred<void> | undefined = undefined
  drainCompleted = 0
  drainCanceled = 0

  constructor(readonly context: Context.Context<never>, readonly options: ResolvedOptions) {
    this.fork = Effect.runForkWith(context)
    this.clock = Context.get(context, Clock.Clock)
  }

  /** Builds the lanes in the current Scope and registers the drain on its closing. */
  static make(options: ResolvedOptions): Effect.Effect<CommandQueue, never, Scope.Scope> {
    return Effect.flatMap(Effect.context<Scope.Scope>(), (context) => {
      const engine = new Engine(context as Context.Context<never>, options)
      return Effect.gen(function*() {
        for (const [name, limits] of options.lanes) {
          const lane = new LaneState(name, limits)
          lane.lanes = yield* Effect.orDie(createLanes<string>({
            maxConcurrent: limits.concurrent,
            activate: engine.activator(lane)
          }))
          engine.byName.set(name, lane)
          engine.all.push(lane)
          lane.metrics = new LaneMetrics(lane, engine.context)
        }
        // Added after the lanes: Scope finalizers run in reverse, so the drain runs before they close.
        yield* Effect.addFinalizer(() => engine.drain(undefined))
        const queue = engine.api()
        engines.set(queue, engine)
        return queue
      })
    })
  }

  api(): CommandQueue {
    const engine = this
    return {
      dispatch: (lane, key, task, options) =>
        Effect.withFiber((fiber) => engine.dispatch(lane, key, task, options as TaskOptions | undefined, fiber.context)) as any,
      restartLane: (lane) => engine.restartLane(lane),
      restartAll: Effect.asVoid(Effect.forEach(engine.all, (lane) => engine.restartLane(lane.name), {
        concurrency: "unbounded",
        discard: true
      }).pipe(Effect.orDie)),
      generation: (lane) => Effect.suspend(() => {
        const l = engine.byName.get(lane)
        return l === undefined ? Effect.fail(engine.unknownLane(lane, "")) : Effect.succeed(l.generation)
      }),
      cancel: (lane, key) => engine.cancelKey(lane, key),
      drain: (options) => engine.drain(options),
      snapshot: Effect.sync(() => engine.snapshotUnsafe())
    }
  }

  unknownLane(lane: string, key: string): RequestError {
    const names = this.all.map((l) => `\`${l.name}\``).join(", ")
    return new RequestError({ lane: String(lane), key: String(key), message: `Unknown lane \`${show(lane)}\`: expected one of ${names}` })
  }

  failure(task: Task, stage: QueueFailureStage, reason: QueueFailureReason): QueueFailure {
    return new QueueFailure({
      runId: task.runId,
      lane: task.lane.name,
      key: task.key,
      participation: task.lane.limits.participation,
      stage,
      reason
    })
  }

  // ---------------------------------------------------------------------------------------------
  // Admission

  /**
   * How the last `admit` took its task: `started`/`queued`/`coalesced`, or `WAKE` when the key was
   * idle and the caller must now run `lanes.wake(key)` and pass its result to `woke`. A field, not
   * a returned pair, so that admission allocates nothing but the task.
   */
  admission: Admission | typeof WAKE = "queued"

  /**
   * Validates and admits a task synchronously (or joins a waiting one, with coalesce). Returns the
   * task, or the refusal as a value. No Effect runs here: the hot path of both skins.
   */
  admit(
    laneName: string,
    key: string,
    body: unknown,
    kind: BodyKind,
    options: TaskOptions | undefined,
    context: Context.Context<never> | undefined,
    preCanceled: boolean
  ): Task | AdmissionError | RequestError {
    const lane = this.byName.get(laneName)
    if (lane === undefined) return this.unknownLane(laneName, key)
    const badKey = checkKey(key)
    if (badKey !== undefined) return new RequestError({ lane: laneName, key: String(key), message: badKey })
    if (options !== undefined) {
      const bad = checkDispatchOptions(options)
      if (bad !== undefined) return new RequestError({ lane: laneName, key, message: bad })
    }
    if (kind === EFFECT_BODY ? !Effect.isEffect(body) : typeof body !== "function") {
      const what = kind === EFFECT_BODY ? "an Effect" : "a function"
      return new RequestError({ lane: laneName, key, message: `Expected \`task\` to be ${what}, got \`${show(body)}\`` })
    }
    if (this.draining) return new AdmissionError({ lane: laneName, key, reason: "closed" })
    let ks = lane.keys.get(key)
    if (!preCanceled && options?.coalesce === true && ks !== undefined && ks.tail !== undefined) {
      this.admission = "coalesced"
      return ks.tail
    }
    if (!preCanceled && lane.owned >= lane.capacity) return new AdmissionError({ lane: laneName, key, reason: "full" })
    const task = new Task(
      nextRunId(),
      lane,
      key,
      lane.generation,
      body,
      kind,
      context,
      this.clock.currentTimeMillisUnsafe(),
      options
    )
    lane.owned++
    lane.waiting++
    this.live++
    this.admission = "queued"
    if (preCanceled) {
      // Never enters a FIFO: it fails `canceled` (stage queued) now, finalizer and report included.
      task.state = DROPPING
      lane.waiting--
      const failure = this.failure(task, "queued", "canceled")
      task.stopped = failure
      this.fork(this.complete(task, Exit.fail(failure)))
      return task
    }
    if (ks === undefined) {
      ks = new KeyTasks()
      lane.keys.set(key, ks)
    }
    ks.push(task)
    if (ks.head !== task || ks.running !== undefined || ks.cancelling) {
      // The key runs or owes an activation already; the one that ends next asks for a follow-up.
      this.armQueueTimer(task)
    } else {
      this.admission = WAKE
    }
    return task
  }

  /** The key of `task` was woken: its admission. */
  woke(task: Task, result: WakeResult): Admission {
    if (result === "started") return "started"
    this.armQueueTimer(task)
    return "queued"
  }

  /** The wake failed (the lanes closed): the task was never admitted. */
  wakeFailed(task: Task): AdmissionError {
    const lane = task.lane
    const ks = lane.keys.get(task.key)
    if (ks !== undefined) {
      ks.unlink(task)
      if (ks.idle && !ks.cancelling) lane.keys.delete(task.key)
    }
    task.state = ENDED
    lane.owned--
    lane.waiting--
    this.live--
    return new AdmissionError({ lane: lane.name, key: task.key, reason: "closed" })
  }

  /** `admit` for the Effect API: the wake, when needed, runs in the caller's fiber. */
  dispatch(
    laneName: string,
    key: string,
    body: Effect.Effect<any, any, any>,
    options: TaskOptions | undefined,
    context: Context.Context<never>
  ): Effect.Effect<FutureImpl<any, any>, AdmissionError | RequestError> {
    const task = this.admit(laneName, key, body, EFFECT_BODY, options, context, false)
    if (!(task instanceof Task)) return Effect.fail(task)
    const admission = this.admission
    if (admission !== WAKE) return Effect.succeed(new FutureImpl(task, admission, this))
    return Effect.matchEffect(task.lane.lanes.wake(key), {
      onFailure: () => Effect.fail(this.wakeFailed(task)),
      onSuccess: (result) => Effect.succeed(new FutureImpl(task, this.woke(task, result), this))
    })
  }

  armQueueTimer(task: Task): void {
    const ms = task.options?.queueTimeoutMs ?? task.lane.limits.queueTimeoutMs
    if (ms === undefined) return
    task.timer = this.fork(Effect.andThen(
      Effect.sleep(ms),
      Effect.suspend(() => {
        if (task.state !== WAITING) return Effect.void
        task.timer = undefined
        return Effect.uninterruptible(this.drop(task, "timeout"))
      })
    ))
  }

  // ---------------------------------------------------------------------------------------------
  // Running: one activation runs one task

  activator(lane: LaneState): (key: string) => Effect.Effect<void> {
    return (key) => Effect.uninterruptible(Effect.suspend(() => this.runNext(lane, key)))
  }

  runNext(lane: LaneState, key: string): Effect.Effect<void> {
    const ks = lane.keys.get(key)
    if (ks === undefined || ks.cancelling || ks.running !== undefined) return Effect.void
    const task = ks.head
    if (task === undefined) return Effect.void
    ks.unlink(task)
    ks.running = task
    task.state = RUNNING
    lane.waiting--
    lane.running++
    const timer = task.timer
    if (timer !== undefined) {
      task.timer = undefined
      timer.interruptUnsafe()
    }
    const now = this.clock.currentTimeMillisUnsafe()
    task.startedAt = now
    const waited = now - task.admittedAt
    lane.metrics.waited(waited)
    const turnMs = task.options?.turnTimeoutMs ?? lane.limits.turnTimeoutMs
    const body = task.kind === EFFECT_BODY ? this.startEffect(task, turnMs) : this.startPromise(task, turnMs)
    // A body that ended synchronously is finished without another step.
    const main: Effect.Effect<void> = Exit.isExit(body)
      ? this.finish(lane, key, task, body)
      : Effect.flatMap(body as Effect.Effect<Exit.Exit<any, any>>, (exit) => this.finish(lane, key, task, exit))
    const warnAfter = lane.limits.warnAfterMs
    if (warnAfter === undefined || waited <= warnAfter) return main
    return Effect.andThen(
      Effect.logWarning(
        `switchyard: task ${task.runId} waited ${waited} ms to start in lane \`${lane.name}\` (warnAfterMs ${warnAfter})`
      ).pipe(Effect.annotateLogs({ runId: task.runId, lane: lane.name, key, waitedMs: waited })),
      main
    )
  }

  turnTimer(task: Task, ms: number): Fiber.Fiber<void> {
    return this.fork(Effect.andThen(Effect.sleep(ms), Effect.sync(() => this.stop(task, "timeout"))))
  }

  /** Forks the body in the caller's context; its exit if it ended synchronously, else an Effect of it. */
  startEffect(task: Task, turnMs: number | undefined): Exit.Exit<any, any> | Effect.Effect<Exit.Exit<any, any>> {
    const body = task.body as Effect.Effect<any, any>
    task.body = undefined
    const fiber = Effect.runForkWith(task.context!)(body)
    task.handle = fiber
    const exit = fiber.pollUnsafe()
    if (exit !== undefined) return exit
    // Stopped while its first synchronous steps ran (they woke a fiber that cancelled it, say).
    if (task.stopped !== undefined) {
      fiber.interruptUnsafe()
      const interrupted = fiber.pollUnsafe()
      if (interrupted !== undefined) return interrupted
    } else if (turnMs !== undefined) {
      task.timer = this.turnTimer(task, turnMs)
    }
    // Not done: this is a callback, never an Exit (so `runNext` cannot take it for one).
    return Fiber.await(fiber)
  }

  /**
   * Calls the function with its AbortSignal (made only for a function that declares a parameter:
   * `signal => ...`; one that declares none cannot see it). Its exit if it returned a plain value
   * or threw, else an Effect of the promise's outcome, or of the queue's stop, whichever is first.
   */
  startPromise(task: Task, turnMs: number | undefined): Exit.Exit<any, any> | Effect.Effect<Exit.Exit<any, any>> {
    const fn = task.body as (signal: AbortSignal) => unknown
    task.body = undefined
    let signal = NO_SIGNAL
    if (fn.length > 0) {
      const controller = new AbortController()
      task.handle = controller
      signal = controller.signal
    }
    let out: unknown
    try {
      out = fn(signal)
    } catch (error) {
      return Exit.fail(error)
    }
    if (!isThenable(out)) return Exit.succeed(out)
    if (turnMs !== undefined) task.timer = this.turnTimer(task, turnMs)
    const promise = out
    return Effect.callback<Exit.Exit<any, any>>((resume) => {
      let settled = false
      task.resume = (exit) => {
        if (settled) return
        settled = true
        task.resume = undefined
        resume(Effect.succeed(exit))
      }
      promise.then(
        (value) => task.resume?.(Exit.succeed(value)),
        (error) => task.resume?.(Exit.fail(error))
      )
      // Stopped before this point: its late result is dropped.
      if (task.stopped !== undefined) task.resume(Exit.fail(task.stopped))
    })
  }

  /** Stops a running task: interrupts its fiber, or aborts its signal and drops its late result. */
  stop(task: Task, reason: QueueFailureReason): void {
    if (task.state !== RUNNING || task.stopped !== undefined) return
    const failure = this.failure(task, "running", reason)
    task.stopped = failure
    const handle = task.handle
    if (task.kind === EFFECT_BODY) {
      ;(handle as Fiber.Fiber<unknown, unknown> | undefined)?.interruptUnsafe()
    } else {
      ;(handle as AbortController | undefined)?.abort(failure)
      task.resume?.(Exit.fail(failure))
    }
  }

  finish(lane: LaneState, key: string, task: Task, exit: Exit.Exit<any, any>): Effect.Effect<void> {
    task.state = FINISHING
    const timer = task.timer
    if (timer !== undefined) {
      task.timer = undefined
      timer.interruptUnsafe()
    }
    task.handle = undefined
    let final = exit
    if (task.stopped !== undefined && Exit.isFailure(exit) && Cause.hasInterrupts(exit.cause)) {
      final = Exit.fail(task.stopped)
    }
    const rest = this.complete(task, final)
    if (rest === VOID) return this.afterRun(lane, key)
    return Effect.andThen(rest, Effect.suspend(() => this.afterRun(lane, key)))
  }

  /** Still inside the activation: if the key has more tasks, a follow-up is owed (it queues at the tail). */
  afterRun(lane: LaneState, key: string): Effect.Effect<void> {
    const ks = lane.keys.get(key)
    if (ks === undefined || ks.head === undefined || ks.running !== undefined || ks.cancelling) return VOID
    return this.wakeKey(lane, key, ks)
  }

  wakeKey(lane: LaneState, key: string, ks: KeyTasks): Effect.Effect<void> {
    return Effect.catch(Effect.asVoid(lane.lanes.wake(key)), () => {
      // The lanes closed (end of a drain): nothing may run any more.
      for (let t = ks.head; t !== undefined;) {
        const next = t.next
        this.fork(this.drop(t, "closed"))
        t = next
      }
      return Effect.void
    })
  }

  // ---------------------------------------------------------------------------------------------
  // Dropping a waiting task, and the end of every task

  /** Drops a waiting task now (synchronously) and returns the rest of its end: finalizer, report, settle. */
  drop(task: Task, reason: QueueFailureReason): Effect.Effect<void> {
    const lane = task.lane
    const ks = lane.keys.get(task.key)
    if (ks !== undefined) {
      ks.unlink(task)
      if (ks.idle && !ks.cancelling) {
        if (this.closing) lane.keys.delete(task.key)
        else this.dropOwedActivation(lane, task.key, ks)
      }
    }
    task.state = DROPPING
    lane.waiting--
    const timer = task.timer
    if (timer !== undefined) {
      task.timer = undefined
      timer.interruptUnsafe()
    }
    const failure = this.failure(task, "queued", reason)
    task.stopped = failure
    return this.complete(task, Exit.fail(failure))
  }

  /**
   * The key's tasks are all gone but its lanes entry may still owe an activation: cancel that in
   * the lanes so no idle key lingers there. Dispatches meanwhile wait; they are woken after.
   */
  dropOwedActivation(lane: LaneState, key: string, ks: KeyTasks): void {
    ks.cancelling = true
    this.fork(Effect.andThen(
      lane.lanes.cancel(key),
      Effect.suspend(() => {
        ks.cancelling = false
        if (lane.keys.get(key) !== ks) return Effect.void
        if (ks.head !== undefined) return this.wakeKey(lane, key, ks)
        if (ks.running === undefined) lane.keys.delete(key)
        return Effect.void
      })
    ))
  }

  /** Finalizer (bounded), release of ownership, report (bounded), then the future settles. */
  complete(task: Task, exit: Exit.Exit<any, any>): Effect.Effect<void> {
    const finalizer = task.options?.finalizer
    if (finalizer === undefined) return this.conclude(task, exit)
    const ms = task.lane.limits.finalizationTimeoutMs
    const run = Effect.suspend(() => {
      const r = finalizer(exit)
      return Effect.isEffect(r) ? r : Effect.void
    })
    return Effect.flatMap(Effect.exit(Effect.timeoutOption(run, ms)), (r) => {
      if (Exit.isSuccess(r)) {
        if (Option.isSome(r.value)) return this.conclude(task, exit)
        return Effect.andThen(this.warn(task, `finalizer overran its ${ms} ms bound and was interrupted`), this.conclude(task, exit))
      }
      if (Exit.isFailure(exit)) {
        return this.conclude(task, Exit.failCause(Cause.combine(exit.cause, asDefects(r.cause))))
      }
      return Effect.andThen(this.warn(task, "finalizer failed after the task succeeded", r.cause), this.conclude(task, exit))
    })
  }

  conclude(task: Task, exit: Exit.Exit<any, any>): Effect.Effect<void> {
    this.release(task, exit)
    const onTaskExit = this.options.onTaskExit
    if (onTaskExit === undefined) {
      this.settle(task, exit)
      return VOID
    }
    const now = this.clock.currentTimeMillisUnsafe()
    const started = task.startedAt >= 0
    const report: TaskReport = {
      runId: task.runId,
      lane: task.lane.name,
      key: task.key,
      generation: task.generation,
      exit,
      waitedMs: (started ? task.startedAt : now) - task.admittedAt,
      ranMs: started ? now - task.startedAt : 0
    }
    const ms = this.options.auditTimeoutMs
    const run = Effect.suspend(() => {
      const r = onTaskExit(report)
      return Effect.isEffect(r) ? (r as Effect.Effect<unknown>) : Effect.void
    })
    return Effect.ensuring(
      Effect.flatMap(Effect.exit(Effect.timeoutOption(run, ms)), (r) =>
        Exit.isSuccess(r)
          ? Option.isSome(r.value) ? Effect.void : this.warn(task, `onTaskExit overran its ${ms} ms bound (auditTimeoutMs)`)
          : this.warn(task, "onTaskExit failed", r.cause)),
      Effect.sync(() => this.settle(task, exit))
    )
  }

  /** The task no longer owns its place; its key moves on. */
  release(task: Task, exit: Exit.Exit<any, any>): void {
    const lane = task.lane
    lane.owned--
    if (task.state === FINISHING) {
      lane.running--
      const ks = lane.keys.get(task.key)
      if (ks !== undefined && ks.running === task) {
        ks.running = undefined
        if (ks.head === undefined && !ks.cancelling) lane.keys.delete(task.key)
      }
    }
    const outcome = lane.metrics.ended(exit)
    if (this.draining) {
      if (outcome === "closed") this.drainCanceled++
      else if (outcome === "success" || outcome === "failure" || outcome === "defect") this.drainCompleted++
    }
  }

  /** Calls `listener` when the task settles (at once if it has). */
  addListener(task: Task, listener: Listener): void {
    if (task.exit !== undefined) return callListener(listener, task.exit)
    const l = task.listeners
    if (l === undefined) task.listeners = listener
    else if (Array.isArray(l)) l.push(listener)
    else task.listeners = [l, listener]
  }

  settle(task: Task, exit: Exit.Exit<any, any>): void {
    task.state = ENDED
    task.exit = exit
    task.context = undefined
    task.body = undefined
    if (task.deferred !== undefined) Deferred.doneUnsafe(task.deferred, exit)
    const listeners = task.listeners
    if (listeners !== undefined) {
      task.listeners = undefined
      if (Array.isArray(listeners)) for (const l of listeners) callListener(l, exit)
      else callListener(listeners, exit)
    }
    this.live--
    if (this.live === 0 && this.idle !== undefined) {
      const idle = this.idle
      this.idle = undefined
      Deferred.doneUnsafe(idle, Exit.void)
    }
  }

  warn(task: Task, message: string, cause?: Cause.Cause<unknown>): Effect.Effect<void> {
    const log = cause === undefined
      ? Effect.logWarning(`switchyard: task ${task.runId}: ${message}`)
      : Effect.logWarning(`switchyard: task ${task.runId}: ${message}`, cause)
    return log.pipe(Effect.annotateLogs({ runId: task.runId, lane: task.lane.name, key: task.key }))
  }

  // ---------------------------------------------------------------------------------------------
  // Futures

  deferredOf(task: Task): Deferred.Deferred<any, any> {
    if (task.deferred === undefined) {
      task.deferred = Deferred.makeUnsafe()
      if (task.exit !== undefined) Deferred.doneUnsafe(task.deferred, task.exit)
    }
    return task.deferred
  }

  awaitTask(task: Task): Effect.Effect<any, any> {
    return Effect.suspend(() => (task.exit !== undefined ? task.exit : Deferred.await(this.deferredOf(task))))
  }

  pollTask(task: Task): Effect.Effect<Option.Option<Exit.Exit<any, any>>> {
    return Effect.sync(() => Option.fromUndefinedOr(task.exit))
  }

  awaitTaskTimeout(task: Task, timeout: Duration.Input): Effect.Effect<any, any> {
    return Effect.suspend(() => {
      const timeoutMs = Duration.toMillis(Duration.fromInputUnsafe(timeout))
      return Effect.timeoutOrElse(this.awaitTask(task), {
        duration: timeout,
        orElse: () => Effect.fail(new FutureTimeout({ runId: task.runId, timeoutMs }))
      })
    })
  }

  /** Waits until the task settled, whatever its outcome. */
  awaitEnd(task: Task): Effect.Effect<void> {
    return Effect.suspend(() => (task.state === ENDED ? Effect.void : Effect.asVoid(Effect.exit(Deferred.await(this.deferredOf(task))))))
  }

  awaitAll(tasks: ReadonlyArray<Task>): Effect.Effect<void> {
    return Effect.forEach(tasks, (t) => this.awaitEnd(t), { discard: true })
  }

  cancelTask(task: Task): Effect.Effect<void> {
    return Effect.suspend(() => {
      switch (task.state) {
        case WAITING:
          return Effect.andThen(Effect.uninterruptible(this.drop(task, "canceled")), this.awaitEnd(task))
        case RUNNING:
          this.stop(task, "canceled")
          return this.awaitEnd(task)
        case ENDED:
          return Effect.void
        default:
          return this.awaitEnd(task)
      }
    })
  }

  // ---------------------------------------------------------------------------------------------
  // Keys, generations, drain, snapshot

  /** Stops every task of `ks` that `select` picks: waiting ones dropped now, running ones interrupted. */
  stopKey(ks: KeyTasks, reason: QueueFailureReason, into: Array<Task>, select?: (t: Task) => boolean): void {
    for (let t = ks.head; t !== undefined;) {
      const next = t.next
      if (select === undefined || select(t)) {
        into.push(t)
        this.fork(this.drop(t, reason))
      }
      t = next
    }
    const running = ks.running
    if (running !== undefined && (select === undefined || select(running))) {
      this.stop(running, reason)
      into.push(running)
    }
  }

  cancelKey(laneName: string, key: string): Effect.Effect<void, RequestError> {
    return Effect.suspend(() => {
      const lane = this.byName.get(laneName)
      if (lane === undefined) return Effect.fail(this.unknownLane(laneName, key))
      const ks = lane.keys.get(key)
      if (ks === undefined) return Effect.void
      const tasks: Array<Task> = []
      this.stopKey(ks, "canceled", tasks)
      return this.awaitAll(tasks)
    })
  }

  restartLane(laneName: string): Effect.Effect<number, RequestError> {
    return Effect.suspend(() => {
      const lane = this.byName.get(laneName)
      if (lane === undefined) return Effect.fail(this.unknownLane(laneName, ""))
      const generation = ++lane.generation
      const tasks: Array<Task> = []
      const older = (t: Task) => t.generation < generation
      for (const ks of Array.from(lane.keys.values())) this.stopKey(ks, "stale", tasks, older)
      return Effect.as(this.awaitAll(tasks), generation)
    })
  }

  drain(options: { readonly timeoutMs?: number } | undefined): Effect.Effect<DrainReport> {
    return Effect.suspend(() => {
      if (this.drained === undefined) {
        const timeoutMs = options?.timeoutMs ?? this.options.drainTimeoutMs
        if (typeof timeoutMs !== "number" || Number.isNaN(timeoutMs) || timeoutMs < 0) {
          return Effect.die(new RequestError({
            lane: "",
            key: "",
            message: `Expected \`timeoutMs\` to be a number from 0 and up, got \`${show(timeoutMs)}\``
          }))
        }
        this.drained = Deferred.makeUnsafe()
        this.draining = true
        this.fork(this.runDrain(timeoutMs))
      }
      return Deferred.await(this.drained)
    })
  }

  runDrain(timeoutMs: number): Effect.Effect<void> {
    const engine = this
    return Effect.gen(function*() {
      let timedOut = false
      if (engine.live > 0) {
        if (timeoutMs <= 0) timedOut = true
        else {
          engine.idle ??= Deferred.makeUnsafe()
          const ended = yield* Effect.timeoutOption(Deferred.await(engine.idle), timeoutMs)
          timedOut = Option.isNone(ended)
        }
      }
      if (timedOut) {
        const tasks: Array<Task> = []
        for (const lane of engine.all) {
          for (const ks of Array.from(lane.keys.values())) engine.stopKey(ks, "closed", tasks)
        }
        yield* engine.awaitAll(tasks)
      }
      if (engine.live > 0) {
        // Tasks dropped before the deadline still finish their finalizer and report.
        engine.idle ??= Deferred.makeUnsafe()
        yield* Deferred.await(engine.idle)
      }
      engine.closing = true
      for (const lane of engine.all) yield* lane.lanes.close
      for (const lane of engine.all) lane.metrics.unregister()
      Deferred.doneUnsafe(engine.drained!, Exit.succeed({
        completed: engine.drainCompleted,
        canceled: engine.drainCanceled,
        timedOut
      }))
    })
  }

  snapshotUnsafe(): ReadonlyArray<LaneSnapshot> {
    return this.all.map((lane): LaneSnapshot => ({
      lane: lane.name,
      participation: lane.limits.participation,
      generation: lane.generation,
      running: lane.running,
      waiting: lane.waiting,
      keys: lane.keys.size,
      concurrent: lane.limits.concurrent,
      queued: lane.limits.queued,
      draining: this.draining
    }))
  }
}
