/**
 * The end of every task, run or dropped: its finalizer (bounded), the release of its place, its
 * report (bounded), then its future settles. Internal to `src/queue` (part of the engine).
 */
import { Cause, Deferred, Effect, Exit, Option } from "effect"
import type { TaskReport } from "./CommandQueue.js"
import type { Engine } from "./engine.js"
import type { Listener, Task } from "./lane.js"
import { ENDED, FINISHING } from "./lane.js"

/** What a part of a task's end returns when it finished synchronously (compared by identity). */
export const VOID: Effect.Effect<void> = Effect.void

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

/** Finalizer (bounded), release of ownership, report (bounded), then the future settles. */
export function complete(engine: Engine, task: Task, exit: Exit.Exit<any, any>): Effect.Effect<void> {
  const finalizer = task.options?.finalizer
  if (finalizer === undefined) return conclude(engine, task, exit)
  const ms = task.lane.limits.finalizationTimeoutMs
  const run = Effect.suspend(() => {
    const r = finalizer(exit)
    return Effect.isEffect(r) ? r : Effect.void
  })
  return Effect.flatMap(Effect.exit(Effect.timeoutOption(run, ms)), (r) => {
    if (Exit.isSuccess(r)) {
      if (Option.isSome(r.value)) return conclude(engine, task, exit)
      return Effect.andThen(
        warn(task, `finalizer overran its ${ms} ms bound and was interrupted`),
        Effect.suspend(() => conclude(engine, task, exit))
      )
    }
    if (Exit.isFailure(exit)) {
      return conclude(engine, task, Exit.failCause(Cause.combine(exit.cause, asDefects(r.cause))))
    }
    return Effect.andThen(
      warn(task, "finalizer failed after the task succeeded", r.cause),
      Effect.suspend(() => conclude(engine, task, exit))
    )
  })
}

/** After the finalizer: release the task's place, report it (bounded), then settle its future. */
export function conclude(engine: Engine, task: Task, exit: Exit.Exit<any, any>): Effect.Effect<void> {
  release(engine, task, exit)
  const onTaskExit = engine.options.onTaskExit
  if (onTaskExit === undefined) {
    settle(engine, task, exit)
    return VOID
  }
  const now = engine.clock.currentTimeMillisUnsafe()
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
  const ms = engine.options.auditTimeoutMs
  const run = Effect.suspend(() => {
    const r = onTaskExit(report)
    return Effect.isEffect(r) ? (r as Effect.Effect<unknown>) : Effect.void
  })
  return Effect.ensuring(
    Effect.flatMap(Effect.exit(Effect.timeoutOption(run, ms)), (r) =>
      Exit.isSuccess(r)
        ? Option.isSome(r.value) ? Effect.void : warn(task, `onTaskExit overran its ${ms} ms bound (auditTimeoutMs)`)
        : warn(task, "onTaskExit failed", r.cause)),
    Effect.sync(() => settle(engine, task, exit))
  )
}

/** The task no longer owns its place; its key moves on. */
export function release(engine: Engine, task: Task, exit: Exit.Exit<any, any>): void {
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
  if (engine.draining) {
    if (outcome === "closed") engine.drainCanceled++
    else if (outcome === "success" || outcome === "failure" || outcome === "defect") engine.drainCompleted++
  }
}

/** Calls `listener` when the task settles (at once if it has). */
export function addListener(task: Task, listener: Listener): void {
  if (task.exit !== undefined) return callListener(listener, task.exit)
  const l = task.listeners
  if (l === undefined) task.listeners = listener
  else if (Array.isArray(l)) l.push(listener)
  else task.listeners = [l, listener]
}

/** The task's exit is final: complete its Deferred and listeners; wake a drain when nothing is left. */
export function settle(engine: Engine, task: Task, exit: Exit.Exit<any, any>): void {
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
  engine.live--
  if (engine.live === 0 && engine.idle !== undefined) {
    const idle = engine.idle
    engine.idle = undefined
    Deferred.doneUnsafe(idle, Exit.void)
  }
}

/** Logs a warning about a task, annotated with its runId, lane and key. */
export function warn(task: Task, message: string, cause?: Cause.Cause<unknown>): Effect.Effect<void> {
  const log = cause === undefined
    ? Effect.logWarning(`switchyard: task ${task.runId}: ${message}`)
    : Effect.logWarning(`switchyard: task ${task.runId}: ${message}`, cause)
  return log.pipe(Effect.annotateLogs({ runId: task.runId, lane: task.lane.name, key: task.key }))
}
