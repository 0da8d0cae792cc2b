/**
 * The engine's plain mutable state: a task, a key's FIFO of tasks, a lane, and the queue-wide
 * fields (`EngineState`); below it in `engine/` only `options.ts`, `metrics.ts` and `taskMore.ts`
 * (a task's states and rare fields, re-exported here). Internal to
 * `src/queue` (not exported from the package). One owner mutates it: the operations above (end,
 * run, admit, control), synchronously.
 */
import { Clock, Context, Effect } from "effect"
import type { Deferred, Exit, Fiber } from "effect"
import { QueueFailure, RequestError } from "../errors.js"
import type { QueueFailureReason, QueueFailureStage } from "../errors.js"
import { Fifo, pushTo, unlinkFrom } from "../fifo.js"
import type { Ends } from "../fifo.js"
import { Entry, IDLE, QUEUED, RunInline } from "../lanes/entry.js"
import type { InlineWork, LanesInternal } from "../lanes/entry.js"
import type { CapacityGroup } from "../lanes/group.js"
import { show } from "../show.js"
import type { Admission, DrainReport } from "../types.js"
import type { LaneMetrics } from "./metrics.js"
import type { ResolvedLimits, ResolvedOptions } from "./options.js"
import type { BodyKind, TaskOptions, TaskState } from "./taskMore.js"
import { EFFECT_BODY, PROMISE_BODY, TaskMore, WAITING } from "./taskMore.js"

export type { BodyKind, Listener, TaskOptions, TaskState } from "./taskMore.js"
export {
  DROPPING,
  EFFECT_BODY,
  ENDED,
  FINISHING,
  PROMISE_BODY,
  RUNNING,
  stopTimer,
  TaskMore,
  WAIT_NOTIFIED,
  WAITING
} from "./taskMore.js"

/** The task's rarely used fields, made when first needed. */
export const moreOf = (task: Task): TaskMore => (task.more ??= new TaskMore())

/** Why the queue stopped the task, if it did. */
export const stoppedOf = (task: Task): QueueFailure | undefined => task.more?.stopped

/**
 * One admitted task. Linked into its key's FIFO while it waits. It is also the work of the lane
 * activation that runs it (`InlineWork`): run as plain code when its turn comes, so a task that
 * ends synchronously needs no activation fiber. An `EffectTask` (Effect API) or a `PromiseBodyTask`
 * (the Promise API's, which is its own future: `AsyncTask` in `asyncTask.ts`).
 */
export abstract class Task implements InlineWork {
  state: TaskState = WAITING
  next: Task | undefined = undefined
  prev: Task | undefined = undefined
  exit: Exit.Exit<any, any> | undefined = undefined
  /** When it started, in ms since the engine's epoch (`EngineState.now`); -1 before. */
  startedAt = -1
  more: TaskMore | undefined = undefined
  /** Its key's entry while it waits or runs (saves the lookups); let go when it settles. */
  keyTasks: KeyTasks | undefined = undefined
  /** Created lazily, when an Effect caller (or `cancel`) awaits; completed when the task settles. */
  abstract deferred: Deferred.Deferred<any, any> | undefined
  constructor(
    /** Its place in the process-wide sequence; `runId` is made from it when asked for. */
    readonly seq: number,
    readonly laneState: LaneState,
    readonly key: string,
    readonly generation: number,
    public body: unknown,
    /** In ms since the engine's epoch (a small integer: no heap number per task). */
    readonly admittedAt: number,
    readonly options: TaskOptions | undefined
  ) {}
  /** Its body: an Effect or a function of an AbortSignal. */
  abstract get kind(): BodyKind
  /** Its activation's turn: runs the task (`runTask` in run.ts); what is left as an Effect, or `Effect.void`. */
  [RunInline](): Effect.Effect<unknown> {
    const lane = this.laneState
    const engine = lane.engine
    return engine.runTask(engine, lane, this.key, this, true)
  }
  /** Unique within the process (a counter, in base 36). */
  get runId(): string {
    return `run-${this.seq.toString(36)}`
  }
  /** Called once when the task settles, after its Deferred (the Promise API's future settles its `result`). */
  onSettled(_exit: Exit.Exit<any, any>): void {}
  /** Its body ended: what ran it is let go. */
  dropHandle(): void {}
}

/** A task of the Effect API: its body runs in a fiber of its own, in the caller's context. */
export class EffectTask extends Task {
  deferred: Deferred.Deferred<any, any> | undefined = undefined
  /** The running body's fiber. */
  handle: Fiber.Fiber<any, any> | undefined = undefined
  context: Context.Context<never> | undefined
  constructor(
    seq: number,
    laneState: LaneState,
    key: string,
    generation: number,
    body: unknown,
    admittedAt: number,
    options: TaskOptions | undefined,
    context: Context.Context<never> | undefined
  ) {
    super(seq, laneState, key, generation, body, admittedAt, options)
    this.context = context
  }
  get kind(): BodyKind {
    return EFFECT_BODY
  }
  override onSettled(): void {
    this.context = undefined
  }
  override dropHandle(): void {
    this.handle = undefined
  }
}

/** `PromiseBodyTask.resume` while its promise is awaited inline (no fiber): `resumeTask` ends it. */
export const RESUME_INLINE = 1

/** A task of the Promise API: a function of an AbortSignal. */
export abstract class PromiseBodyTask extends Task {
  /**
   * Settles the running stage once (late results are dropped): `RESUME_INLINE` while its promise
   * is awaited inline, a callback inside an activation fiber, undefined otherwise.
   */
  resume: ((exit: Exit.Exit<any, any>) => void) | typeof RESUME_INLINE | undefined = undefined
  // Spelled out: an implicit derived constructor forwards its arguments through a generic builtin
  // (`(...args) => super(...args)`), which the compiler does not inline.
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
  get kind(): BodyKind {
    return PROMISE_BODY
  }
  // Only `cancel` awaits a Promise-API task through a Deferred: it lives with the rare fields.
  get deferred(): Deferred.Deferred<any, any> | undefined {
    return this.more?.deferred
  }
  set deferred(deferred: Deferred.Deferred<any, any> | undefined) {
    moreOf(this).deferred = deferred
  }
}

/** What `admit` makes a task with (the Effect API's `EffectTask`, the Promise API's `AsyncTask`). */
export type TaskClass = new(
  seq: number,
  laneState: LaneState,
  key: string,
  generation: number,
  body: unknown,
  admittedAt: number,
  options: TaskOptions | undefined,
  context: Context.Context<never> | undefined
) => Task

/**
 * One key of a lane: the FIFO of its waiting tasks and the task it runs. The same object is the
 * key's entry in the lanes (`Entry`, one map for both: `LaneState.keys`), so a key costs one
 * object and one map slot. It leaves the map once neither side holds the key (`forgetKey`).
 */
export class KeyTasks extends Entry<string> implements Ends<Task> {
  head: Task | undefined = undefined
  tail: Task | undefined = undefined
  running: Task | undefined = undefined
  /** What few keys need (a cancel in flight, shared promise handlers), made when first needed. */
  more: KeyMore | undefined = undefined

  /** A `lanes.cancel(key)` is in flight to drop an activation owed for tasks that are gone. */
  get cancelling(): boolean {
    return this.more !== undefined && this.more.cancelling
  }
  set cancelling(cancelling: boolean) {
    if (cancelling) (this.more ??= new KeyMore()).cancelling = true
    else if (this.more !== undefined) this.more.cancelling = false
  }

  /** Whether the key holds no task at all (nothing waits, nothing runs). */
  get idle(): boolean {
    return this.head === undefined && this.running === undefined
  }

  push(task: Task): void {
    pushTo(this, task)
    // a new next task for a key that waits in the lanes: ranked again
    if (this.head === task && this.state === QUEUED) rerank(task.laneState, this)
  }

  unlink(task: Task): void {
    const head = this.head === task
    unlinkFrom(this, task)
    if (head && this.state === QUEUED) rerank(task.laneState, this)
  }
}

/**
 * A key's rare fields. `ok`/`err` are the handlers its Promise tasks' promises settle through, made
 * once for a key that has more tasks to run (`awaitSettled` in run.ts: a key runs one task at a
 * time), instead of a pair of closures per task; `task` is the one whose promise has them.
 */
export class KeyMore {
  cancelling = false
  task: PromiseBodyTask | undefined = undefined
  ok: ((value: unknown) => void) | undefined = undefined
  err: ((error: unknown) => void) | undefined = undefined
}

/**
 * What the lanes rank the key by (its next task, whether it has one to start: `ranking` in
 * makeLane.ts) may have changed: they rank it again if it waits.
 */
export const rerank = (lane: LaneState, ks: KeyTasks): void => {
  if (lane.prioritized) lane.lanes.rerank(ks)
}

/** Whether the engine still holds the key (the lanes must keep its entry in the map). */
export const engineHolds = (ks: KeyTasks): boolean => ks.head !== undefined || ks.running !== undefined || ks.cancelling

/** The engine is done with the key: it leaves the map unless the lanes still hold it. */
export const forgetKey = (lane: LaneState, ks: KeyTasks): void => {
  if (ks.state === IDLE && !engineHolds(ks)) lane.keys.delete(ks.key)
}

/** The keys the engine holds (those the lanes alone still hold, between a task's end and its activation's, are not counted). */
export const keysHeld = (lane: LaneState): number => {
  let n = 0
  for (const ks of lane.keys.values()) if (engineHolds(ks)) n++
  return n
}

/** What a `removeLane` in progress counts, and the Deferred its callers wait on. */
export interface Removal {
  completed: number
  canceled: number
  readonly done: Deferred.Deferred<DrainReport>
}

/** One lane: its limits, its keyed lanes, its keys' FIFOs and its counters. */
export class LaneState {
  generation = 0
  /** Tasks admitted and not ended (the ownership bound is `capacity`). */
  owned = 0
  running = 0
  waiting = 0
  /** Tasks admitted and not settled. */
  live = 0
  /** Completed when `live` reaches 0 (removeLane and `waitForIdle` wait on it). */
  idle: Deferred.Deferred<void> | undefined = undefined
  readonly keys = new Map<string, KeyTasks>()
  /** `concurrent + queued`: the ownership bound. */
  capacity: number
  /** A dispatch has asked for a priority other than 0: the lanes rank keys (see `ranking` in makeLane.ts). */
  prioritized = false
  paused = false
  /** Set by `removeLane`: admission is closed, the lane is forgotten once its tasks ended. */
  removal: Removal | undefined = undefined
  /** Made by a dispatch to an unknown name (`unknownLane`): forgotten when idle long enough. */
  auto = false
  /** When an auto lane was last seen idle or busy (its place in `EngineState.autoLanes`). */
  touchedAt = 0
  prev: LaneState | undefined = undefined
  next: LaneState | undefined = undefined
  lanes!: LanesInternal<string>
  engine!: EngineState
  metrics!: LaneMetrics
  /** The capacity group the lane is in, if any. */
  group: GroupState | undefined = undefined
  constructor(readonly name: string, public limits: ResolvedLimits) {
    this.capacity = limits.concurrent + limits.queued
  }
}

/**
 * The task whose body the current fiber runs (in its context from its start; `CommandQueue.keepAlive`
 * and the "would wait for itself" check read it). Undefined outside a task.
 */
export const CurrentTask = Context.Reference<Task | undefined>("switchyard/queue/CurrentTask", {
  defaultValue: () => undefined
})
/** A capacity group: its budget (shared with its lanes' schedulers) and its lanes. */
export interface GroupState {
  readonly name: string
  readonly budget: CapacityGroup
  readonly lanes: Array<LaneState>
}

/** `admit` left the key idle: the caller must wake it. */
export const WAKE = "wake" as const

/** The queue-wide state of one queue: its lanes, its drain, and what every operation shares. */
export class EngineState {
  /** The lanes by name, in the order they were made. */
  readonly byName = new Map<string, LaneState>()
  readonly groups = new Map<string, GroupState>()
  /** Auto lanes (`unknownLane`), least recently touched first: the sweep forgets idle ones from the head. */
  readonly autoLanes = new Fifo<LaneState>()
  /** The timer that forgets idle auto lanes, while one is armed. */
  sweeper: Fiber.Fiber<unknown, unknown> | undefined = undefined
  /** Arms the sweeper (given by the layer that wires the engine). */
  armSweeper: (engine: EngineState) => void = () => {}
  readonly fork: <A, E>(effect: Effect.Effect<A, E>) => Fiber.Fiber<A, E>
  readonly clock: Clock.Clock
  /** The clock's time when the engine was made (see `now`). */
  readonly epoch: number
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
  /**
   * How the last `admit` took its task: `started`/`queued`/`coalesced`, or `WAKE` when the key was
   * idle and the caller must now wake it. A field, not a returned pair, so that admission
   * allocates nothing but the task.
   */
  admission: Admission | typeof WAKE = "queued"

  constructor(
    readonly context: Context.Context<never>,
    readonly options: ResolvedOptions,
    /** The activation's work of a task (`runTask` in run.ts, given by the layer that wires the engine). */
    readonly runTask: (
      engine: EngineState,
      lane: LaneState,
      key: string,
      task: Task,
      inline: boolean
    ) => Effect.Effect<void>
  ) {
    this.fork = Effect.runForkWith(context)
    this.clock = Context.get(context, Clock.Clock)
    this.epoch = this.clock.currentTimeMillisUnsafe()
  }

  /**
   * The clock in ms since the engine was made: what tasks keep (`admittedAt`, `startedAt`), a
   * small integer for 24 days (a V8 small integer, where a wall-clock time is a heap number).
   */
  now(): number {
    const ms = this.clock.currentTimeMillisUnsafe() - this.epoch
    // `| 0` makes it a V8 small integer, so the task fields that hold it need no heap number (one
    // stored double would turn the field into a boxed double on every task); past 2^30 ms (12
    // days) the plain number, exact as ever.
    return ms >= 0 && ms < 0x40000000 ? ms | 0 : ms
  }

  /** Every lane, in the order they were made. */
  get all(): Array<LaneState> {
    return Array.from(this.byName.values())
  }
}

/** An auto lane had activity: it moves to the tail of the sweep's order. */
export const touchAuto = (engine: EngineState, lane: LaneState): void => {
  if (lane.removal !== undefined || engine.byName.get(lane.name) !== lane) return
  lane.touchedAt = engine.clock.currentTimeMillisUnsafe()
  const list = engine.autoLanes
  if (lane.prev !== undefined || list.head === lane) list.unlink(lane)
  list.push(lane)
  if (engine.sweeper === undefined) engine.armSweeper(engine)
}

/** The failure of a task the queue stops or drops. */
export const failureOf = (task: Task, stage: QueueFailureStage, reason: QueueFailureReason): QueueFailure =>
  new QueueFailure({
    runId: task.runId,
    lane: task.laneState.name,
    key: task.key,
    participation: task.laneState.limits.participation,
    stage,
    reason
  })

/** The `RequestError` for a lane name the queue does not have. */
export const unknownLane = (engine: EngineState, lane: string, key: string): RequestError => {
  const names = engine.all.map((l) => `\`${l.name}\``).join(", ")
  return new RequestError({
    lane: String(lane),
    key: String(key),
    message: `Expected \`lane\` to be one of ${names}, got \`${show(lane)}\``
  })
}
