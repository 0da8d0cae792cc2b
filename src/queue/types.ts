/**
 * The public shapes of the command queue: lane limits, options, reports, snapshots, the queue and
 * its futures. Imports nothing above it (`CommandQueue.ts` and `Future.ts` re-export these).
 */
import type { Duration, Effect, Exit, Option } from "effect"
import type { AdmissionError, FutureTimeout, Participation, QueueFailure, RequestError } from "./errors.js"

/** How a dispatch was admitted: its task began at once, waits, or joined a waiting task. */
export type Admission = "started" | "queued" | "coalesced"

/** The future of one dispatched task. */
export interface Future<A, E> {
  /** Unique within the process; a coalesced future carries the joined task's runId. */
  readonly runId: string
  readonly lane: string
  readonly key: string
  /** The lane's generation at admission. */
  readonly generation: number
  readonly admission: Admission
  /**
   * The task's value, its own failure unchanged, or a `QueueFailure`; a defect stays a defect.
   * Interrupting the awaiting fiber never cancels the task. Awaited from inside a task of the same
   * lane and key (it would wait for itself), it fails `RequestError` at once.
   */
  readonly await: Effect.Effect<A, E | QueueFailure | RequestError>
  /** The outcome if the task has settled; never waits. */
  readonly poll: Effect.Effect<Option.Option<Exit.Exit<A, E | QueueFailure>>>
  /** As `await`, but fails `FutureTimeout` when the deadline passes first; the task goes on. */
  readonly awaitTimeout: (timeout: Duration.Input) => Effect.Effect<A, E | QueueFailure | FutureTimeout | RequestError>
  /** Drops the task if it waits, interrupts it if it runs; returns once it ended. A task that ended keeps its outcome. */
  readonly cancel: Effect.Effect<void>
}

/** The limits of one lane. Every number is validated by `make`. */
export interface LaneLimits {
  /** Keys running at once in this lane: an integer from 1 up. */
  readonly concurrent: number
  /** Tasks that may wait beyond `concurrent`: an integer from 0 through `MAX_QUEUED` (10_000). */
  readonly queued: number
  /** Whether the lane's work blocks a user (`blocking`, the default for new lanes) or runs behind the scenes. */
  readonly participation?: Participation
  /** A task running longer is interrupted and fails `QueueFailure` `timeout` (stage running). */
  readonly turnTimeoutMs?: number
  /** A task not started by then fails `QueueFailure` `timeout` (stage queued). */
  readonly queueTimeoutMs?: number
  /** A task that waited longer than this to start logs one warning. */
  readonly warnAfterMs?: number
  /** Bound on each task's finalizer; default 5_000. */
  readonly finalizationTimeoutMs?: number
  /**
   * Promise API: after a task's signal aborts, its slot stays held up to this long for the task to
   * clean up; then the slot is freed and a late result dropped. Without it the slot is freed at once.
   */
  readonly abortGraceMs?: number
  /** Each `agingMs` a task waits adds 1 to its effective priority (see `DispatchOptions.priority`); default 5_000. */
  readonly agingMs?: number
}

/** The limits of the lanes that `unknownLane` makes, and how long such a lane may idle before it is forgotten. */
export interface UnknownLaneLimits extends LaneLimits {
  /** A lane made this way with no task and no key for this long is forgotten; default 60_000. */
  readonly idleMs?: number
}

/** One capacity group of `make`'s `groups`: a budget of running tasks over its lanes. */
export interface GroupLimits {
  /** Tasks running at once across the group's lanes: an integer from 1 up. */
  readonly concurrent: number
  /** The lanes that share it; a lane is in at most one group. */
  readonly lanes: ReadonlyArray<string>
}

/** One capacity group as `groupSnapshot` sees it: `running` and `waiting` count its lanes' tasks. */
export interface GroupSnapshot {
  readonly group: string
  readonly concurrent: number
  readonly running: number
  readonly waiting: number
}

/** What `onTaskExit` receives, once per task, after the task's finalizer. */
export interface TaskReport {
  readonly runId: string
  readonly lane: string
  readonly key: string
  readonly generation: number
  readonly exit: Exit.Exit<unknown, unknown>
  /** From admission to start (or to being dropped, for a task that never started). */
  readonly waitedMs: number
  /** From start to end; 0 for a task that never started. */
  readonly ranMs: number
}

/**
 * What `onWait` receives: once when a task has waited the lane's `warnAfterMs`, and again when it
 * starts. `queuedAhead`: tasks of the lane that will start before it, as things stand (0 at its start).
 */
export interface WaitInfo {
  readonly runId: string
  readonly lane: string
  readonly key: string
  readonly waitedMs: number
  readonly queuedAhead: number
}

/** One lane as `snapshot` sees it. `running` and `waiting` count tasks; `keys` counts keys holding tasks. */
export interface LaneSnapshot {
  readonly lane: string
  readonly participation: Participation
  readonly generation: number
  readonly running: number
  readonly waiting: number
  readonly keys: number
  readonly concurrent: number
  readonly queued: number
  readonly draining: boolean
  /** `pause` was called and `resume` not since: nothing starts. */
  readonly paused: boolean
  /** The capacity group the lane is in; absent when it is in none. */
  readonly group?: string
}

/** What a drain did: tasks that ended by themselves meanwhile, tasks failed `closed`, whether the deadline passed. */
export interface DrainReport {
  readonly completed: number
  readonly canceled: number
  readonly timedOut: boolean
}

/** The options of `make` (and of `createCommandQueue`). */
export interface CommandQueueOptions {
  /** Merged over the default lanes `main`, `heartbeat`, `cron`; more names allowed. */
  readonly lanes?: Readonly<Record<string, Partial<LaneLimits>>>
  /** The deadline of a drain (and of closing the Scope); default 30_000. */
  readonly drainTimeoutMs?: number
  /** Bound on each `onTaskExit` call; default 1_000. */
  readonly auditTimeoutMs?: number
  /** Called once per task after its finalizer; a failure or overrun is logged as a warning. */
  readonly onTaskExit?: (report: TaskReport) => Effect.Effect<void> | void
  /**
   * Called once per task that has waited its lane's `warnAfterMs`, and again when it starts
   * (lanes without `warnAfterMs` never call it). A throw (or a failing Effect) is logged and changes nothing.
   */
  readonly onWait?: (info: WaitInfo) => Effect.Effect<void> | void
  /** When given, a dispatch to a lane name no lane has makes that lane with these limits; it is forgotten once idle for `idleMs`. */
  readonly unknownLane?: UnknownLaneLimits
  /** Capacity groups: a task of a lane in a group starts only when its lane and its group have a free slot. */
  readonly groups?: Readonly<Record<string, GroupLimits>>
}

/** The options of one `dispatch`. */
export interface DispatchOptions<A, E> {
  /** Join a task of this key that waits and has not started, instead of adding one. */
  readonly coalesce?: boolean
  /** Overrides the lane's `queueTimeoutMs` for this task. */
  readonly queueTimeoutMs?: number
  /** Overrides the lane's `turnTimeoutMs` for this task. */
  readonly turnTimeoutMs?: number
  /** Runs exactly once after the task ended (also when it was dropped), bounded by the lane's `finalizationTimeoutMs`. */
  readonly finalizer?: (exit: Exit.Exit<A, E | QueueFailure>) => Effect.Effect<void, unknown>
  /**
   * Higher starts first (default 0): a freed slot goes to the waiting key whose next task has the
   * highest `priority + floor(waitedMs / agingMs)`; a key's own tasks keep their admission order.
   */
  readonly priority?: number
}

/** A queue of named lanes. Every method is safe to call from any fiber. */
export interface CommandQueue {
  /**
   * Admits `task` in `lane` under `key` and returns its future at once (it never waits for the
   * task). Tasks of one key run one at a time in admission order; the task runs with the
   * context `dispatch` was called in. Refuses with `AdmissionError` (draining, or the lane owns
   * `concurrent + queued` tasks) or `RequestError` (unknown lane, empty key, bad option).
   */
  readonly dispatch: <A, E = never, R = never>(
    lane: string,
    key: string,
    task: Effect.Effect<A, E, R>,
    options?: DispatchOptions<A, E>
  ) => Effect.Effect<Future<A, E>, AdmissionError | RequestError, R>
  /**
   * Makes every task of `lane` stale: waiting ones fail `stale` at once and never run, running
   * ones are interrupted; returns the new generation once they all ended (finalizers included).
   */
  readonly restartLane: (lane: string) => Effect.Effect<number, RequestError>
  /** `restartLane` for every lane. */
  readonly restartAll: Effect.Effect<void>
  /** The lane's current generation (0 at first). */
  readonly generation: (lane: string) => Effect.Effect<number, RequestError>
  /** Cancels every task of `key` in `lane` (as `Future.cancel`), and returns once they ended. */
  readonly cancel: (lane: string, key: string) => Effect.Effect<void, RequestError>
  /**
   * Closes admission at once, lets admitted work go on until it ended or the deadline
   * (default `drainTimeoutMs`) passed, then fails what is left `closed`. A second drain waits for the first.
   */
  readonly drain: (options?: { readonly timeoutMs?: number }) => Effect.Effect<DrainReport>
  /** One snapshot per lane. */
  readonly snapshot: Effect.Effect<ReadonlyArray<LaneSnapshot>>
  /** Adds a lane while the queue runs; `RequestError` if the name is taken or a limit is bad. */
  readonly addLane: (name: string, limits: LaneLimits) => Effect.Effect<void, RequestError>
  /**
   * Closes the lane's admission (`AdmissionError` `closed`), lets its tasks finish until the
   * deadline (default `drainTimeoutMs`), fails the rest `closed`, then forgets the lane.
   * `main`, `heartbeat` and `cron` cannot be removed (`RequestError`).
   */
  readonly removeLane: (
    name: string,
    options?: { readonly timeoutMs?: number }
  ) => Effect.Effect<DrainReport, RequestError>
  /**
   * Changes the lane's limits from now on: a larger `concurrent` starts waiting tasks at once, a
   * smaller one lets running tasks finish; a smaller `queued` drops nothing admitted.
   */
  readonly setLimits: (lane: string, limits: Partial<LaneLimits>) => Effect.Effect<void, RequestError>
  /** Starts nothing more in the lane (admission stays open; running tasks go on). */
  readonly pause: (lane: string) => Effect.Effect<void, RequestError>
  /** Starts what waits in the lane again, longest waiter first. */
  readonly resume: (lane: string) => Effect.Effect<void, RequestError>
  /** One snapshot per capacity group. */
  readonly groupSnapshot: Effect.Effect<ReadonlyArray<GroupSnapshot>>
  /** Changes a group's budget: a larger one starts waiting tasks at once, a smaller one lets running tasks finish. */
  readonly setGroupLimits: (
    group: string,
    limits: { readonly concurrent: number }
  ) => Effect.Effect<void, RequestError>
  /**
   * Waits until the lane (or every lane) has nothing running or waiting, or until `timeoutMs`
   * passed (then `{ idle: false }`). Admission stays open, unlike `drain`.
   */
  readonly waitForIdle: (
    options?: { readonly lane?: string; readonly timeoutMs?: number }
  ) => Effect.Effect<{ readonly idle: boolean }>
  /**
   * Fails every waiting task of `lane` `QueueFailure` `canceled` (stage queued; finalizers run),
   * leaves running ones alone, and returns how many it dropped once they settled.
   */
  readonly clear: (lane: string) => Effect.Effect<number, RequestError>
}
