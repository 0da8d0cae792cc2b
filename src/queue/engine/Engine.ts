/**
 * The command queue's engine: one `createLanes` per lane, a FIFO of tasks per key, admission, and
 * the activation that runs one task. Internal to `src/queue`: `CommandQueue.make` and
 * `createCommandQueue` are its two skins. Its other parts: `run.ts` (a task's body), `ending.ts`
 * (finalizer, release, report, settle), `lifecycle.ts` (futures, cancel, generations, drain).
 *
 * All state is plain and mutable, changed synchronously (no Ref round trips on the hot path). A
 * lane activation runs exactly one task of its key, then asks for a follow-up if the key has more,
 * so a busy key queues behind the keys that waited meanwhile (lanes.md fairness).
 */
import { Cause, Clock, Context, Effect, Exit, Fiber } from "effect"
import type { Deferred } from "effect"
import type { Scope } from "effect"
import type { CommandQueue, DrainReport } from "./CommandQueue.js"
import { AdmissionError, QueueFailure, RequestError } from "./errors.js"
import type { QueueFailureReason, QueueFailureStage } from "./errors.js"
import type { Admission, FutureOps } from "./Future.js"
import { FutureImpl } from "./Future.js"
import type { BodyKind, TaskOptions } from "./lane.js"
import { DROPPING, EFFECT_BODY, ENDED, FINISHING, KeyTasks, LaneState, RUNNING, Task, WAITING } from "./lane.js"
import { complete, VOID } from "./ending.js"
import { createLanesInternal } from "./lanesCore.js"
import type { WakeResult } from "./Lanes.js"
import { cancelKey, drain, futureOps, restartLane, snapshotUnsafe } from "./lifecycle.js"
import { LaneMetrics } from "./metrics.js"
import { runTask } from "./run.js"
import type { ResolvedOptions } from "./validate.js"
import { checkDispatchOptions, checkKey, show } from "./validate.js"

/** `admit` left the key idle: the caller must wake it. */
export const WAKE = "wake" as const

/** The process-wide task counter behind every runId. */
let runSeq = 0

const engines = new WeakMap<object, Engine>()
/** The engine behind a queue made by `CommandQueue.make`. @internal */
export const engineOf = (queue: CommandQueue): Engine => engines.get(queue)!

/** @internal */
export class Engine {
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
  /** What futures call (await, poll, cancel). */
  readonly ops: FutureOps = futureOps(this)

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
          lane.engine = engine
          lane.lanes = yield* Effect.orDie(createLanesInternal<string>({
            maxConcurrent: limits.concurrent,
            activate: engine.activator(lane)
          }, { uninterruptibleWork: true, inlineWork: true }))
          engine.byName.set(name, lane)
          engine.all.push(lane)
          lane.metrics = new LaneMetrics(lane, engine.context)
        }
        // Added after the lanes: Scope finalizers run in reverse, so the drain runs before they close.
        yield* Effect.addFinalizer(() => drain(engine, undefined))
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
      restartLane: (lane) => restartLane(engine, lane),
      restartAll: Effect.asVoid(Effect.forEach(engine.all, (lane) => restartLane(engine, lane.name), {
        concurrency: "unbounded",
        discard: true
      }).pipe(Effect.orDie)),
      generation: (lane) => Effect.suspend(() => {
        const l = engine.byName.get(lane)
        return l === undefined ? Effect.fail(engine.unknownLane(lane, "")) : Effect.succeed(l.generation)
      }),
      cancel: (lane, key) => cancelKey(engine, lane, key),
      drain: (options) => drain(engine, options),
      snapshot: Effect.sync(() => snapshotUnsafe(engine))
    }
  }

  unknownLane(lane: string, key: string): RequestError {
    const names = this.all.map((l) => `\`${l.name}\``).join(", ")
    return new RequestError({
      lane: String(lane),
      key: String(key),
      message: `Expected \`lane\` to be one of ${names}, got \`${show(lane)}\``
    })
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
      ++runSeq,
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
      this.fork(complete(this, task, Exit.fail(failure)))
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
    const admission = this.admission === WAKE ? this.wake(task) : this.admission
    return typeof admission === "string" ? Effect.succeed(new FutureImpl(task, admission, this.ops)) : Effect.fail(admission)
  }

  /** After `admit` returned `WAKE`: wakes the task's key now (synchronously); its admission, or the refusal. */
  wake(task: Task): Admission | AdmissionError {
    const result = task.lane.lanes.wakeUnsafe(task.key)
    return typeof result === "string" ? this.woke(task, result) : this.wakeFailed(task)
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

  /**
   * What `createLanes` calls when the key gets its slot: the key's next task starts now (it runs,
   * as `snapshot` and `admission: "started"` say, from here on); its body runs when the
   * activation's fiber does, right after.
   */
  activator(lane: LaneState): (key: string) => Effect.Effect<void> {
    return (key) => {
      const task = this.pick(lane, key)
      // The task is the activation's work (an InlineWork: `run` when its turn comes, as plain
      // code; a fiber only for what does not end synchronously). The lanes run it
      // uninterruptibly: a task's end always runs; the engine stops tasks itself.
      return task === undefined ? VOID : (task as unknown as Effect.Effect<void>)
    }
  }

  /** Takes the key's next task off its FIFO and makes it the running one (synchronously). */
  pick(lane: LaneState, key: string): Task | undefined {
    const ks = lane.keys.get(key)
    // A key whose owed activation is being cancelled, or that has nothing left: nothing to do.
    if (ks === undefined || ks.cancelling || ks.running !== undefined) return undefined
    const task = ks.head
    if (task === undefined) return undefined
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
    task.startedAt = this.clock.currentTimeMillisUnsafe()
    lane.metrics.waited(task.startedAt - task.admittedAt)
    return task
  }

  /** The activation's work (see `runTask` in run.ts); `VOID` when all of it ended synchronously. */
  run(lane: LaneState, key: string, task: Task, inline: boolean): Effect.Effect<void> {
    return runTask(this, lane, key, task, inline)
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
    const rest = complete(this, task, final)
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
    if (typeof lane.lanes.wakeUnsafe(key) !== "string") {
      // The lanes closed (end of a drain): nothing may run any more.
      for (let t = ks.head; t !== undefined;) {
        const next = t.next
        this.fork(this.drop(t, "closed"))
        t = next
      }
    }
    return VOID
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
    return complete(this, task, Exit.fail(failure))
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

  // ---------------------------------------------------------------------------------------------
  // Futures

  // ---------------------------------------------------------------------------------------------
  // Keys, generations, drain, snapshot

}
