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
import { LaneMetrics } from "./metrics.js"
import type { ResolvedOptions } from "./validate.js"
import { checkDispatchOptions, checkKey, show } from "./validate.js"

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
    listener(exit)
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
  readonly wrapFuture = (task: Task, admission: Admission) => new FutureImpl<any, any>(task, admission, this)

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
        Effect.withFiber((fiber) =>
          engine.dispatch(lane, key, task, EFFECT_BODY, options as TaskOptions | undefined, fiber.context, false, engine.wrapFuture)
        ) as any,
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

  /** Admits a task (or joins one, with coalesce) and wraps it with `wrap`. Synchronous but for the wake. */
  dispatch<F>(
    laneName: string,
    key: string,
    body: unknown,
    kind: BodyKind,
    options: TaskOptions | undefined,
    context: Context.Context<never>,
    preCanceled: boolean,
    wrap: (task: Task, admission: Admission) => F
  ): Effect.Effect<F, AdmissionError | RequestError> {
    const lane = this.byName.get(laneName)
    if (lane === undefined) return Effect.fail(this.unknownLane(laneName, key))
    const badKey = checkKey(key)
    if (badKey !== undefined) return Effect.fail(new RequestError({ lane: laneName, key: String(key), message: badKey }))
    if (options !== undefined) {
      const bad = checkDispatchOptions(options)
      if (bad !== undefined) return Effect.fail(new RequestError({ lane: laneName, key, message: bad }))
    }
    if (kind === EFFECT_BODY ? !Effect.isEffect(body) : typeof body !== "function") {
      const what = kind === EFFECT_BODY ? "an Effect" : "a function"
      return Effect.fail(new RequestError({ lane: laneName, key, message: `Expected \`task\` to be ${what}, got \`${show(body)}\`` }))
    }
    if (this.draining) return Effect.fail(new AdmissionError({ lane: laneName, key, reason: "closed" }))
    let ks = lane.keys.get(key)
    if (!preCanceled && options?.coalesce === true && ks !== undefined && ks.tail !== undefined) {
      return Effect.succeed(wrap(ks.tail, "coalesced"))
    }
    if (!preCanceled && lane.owned >= lane.capacity) {
      return Effect.fail(new AdmissionError({ lane: laneName, key, reason: "full" }))
    }
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
    if (preCanceled) {
      // Never enters a FIFO: it fails `canceled` (stage queued) now, finalizer and report included.
      task.state = DROPPING
      lane.waiting--
      const failure = this.failure(task, "queued", "canceled")
      task.stopped = failure
      this.fork(this.complete(task, Exit.fail(failure)))
      return Effect.succeed(wrap(task, "queued"))
    }
    if (ks === undefined) {
      ks = new KeyTasks()
      lane.keys.set(key, ks)
    }
    ks.push(task)
    if (ks.head !== task || ks.running !== undefined || ks.cancelling) {
      // The key runs or owes an activation already; the one that ends next asks for a follow-up.
      this.armQueueTimer(task)
      return Effect.succeed(wrap(task, "queued"))
    }
    return Effect.matchEffect(lane.lanes.wake(key), {
      onFailure: () => {
        ks.unlink(task)
        if (ks.idle && !ks.cancelling) lane.keys.delete(key)
        lane.owned--
        lane.waiting--
        this.live--
        return Effect.fail(new AdmissionError({ lane: laneName, key, reason: "closed" }))
      },
      onSuccess: (woke) => {
        if (woke !== "started") this.armQueueTimer(task)
        return Effect.succeed(wrap(task, woke === "started" ? "started" : "queued"))
      }
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
    const main = Effect.flatMap(body, (exit) => this.finish(lane, key, task, exit))
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

  startEffect(task: Task, turnMs: number | undefined): Effect.Effect<Exit.Exit<any, any>> {
    const body = task.body as Effect.Effect<any, any>
    task.body = undefined
    const fiber = Effect.runForkWith(task.context!)(body)
    task.handle = fiber
    if (fiber.pollUnsafe() !== undefined) return Fiber.await(fiber)
    // Stopped while its first synchronous steps ran (it cancelled itself, say).
    if (task.stopped !== undefined) fiber.interruptUnsafe()
    else if (turnMs !== undefined) task.timer = this.turnTimer(task, turnMs)
    return Fiber.await(fiber)
  }

  startPromise(task: Task, turnMs: number | undefined): Effect.Effect<Exit.Exit<any, any>> {
    const fn = task.body as (signal: AbortSignal) => unknown
    task.body = undefined
    const controller = new AbortController()
    task.handle = controller
    let out: unknown
    try {
      out = fn(controller.signal)
    } catch (error) {
      return Effect.succeed(Exit.fail(error))
    }
    if (!isThenable(out)) return Effect.succeed(Exit.succeed(out))
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
    if (handle instanceof AbortController) {
      handle.abort(failure)
      task.resume?.(Exit.fail(failure))
    } else if (handle !== undefined) {
      handle.interruptUnsafe()
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
    return Effect.andThen(this.complete(task, final), Effect.suspend(() => this.afterRun(lane, key)))
  }

  /** Still inside the activation: if the key has more tasks, a follow-up is owed (it queues at the tail). */
  afterRun(lane: LaneState, key: string): Effect.Effect<void> {
    const ks = lane.keys.get(key)
    if (ks === undefined || ks.head === undefined || ks.running !== undefined || ks.cancelling) return Effect.void
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
    const now = this.clock.currentTimeMillisUnsafe()
    this.release(task, exit)
    const onTaskExit = this.options.onTaskExit
    if (onTaskExit === undefined) {
      this.settle(task, exit)
      return Effect.void
    }
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
    if (task.exit !== undefined) return listener(task.exit)
    const l = task.listeners
    if (l === undefined) task.listeners = listener
    else if (typeof l === "function") task.listeners = [l, listener]
    else l.push(listener)
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
      if (typeof listeners === "function") callListener(listeners, exit)
      else for (const l of listeners) callListener(l, exit)
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
