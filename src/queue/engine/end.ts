/**
 * The end of every task, run or dropped: a run that ended (`finish`) and the follow-up its key is
 * owed, a waiting task dropped (`drop`), then for both its finalizer (bounded), the release of its
 * place, its report (bounded), and its future settles. Internal to `src/queue` (part of the engine;
 * it reads and changes `state.ts` only).
 */
import { Cause, Deferred, Effect, Exit, Option } from "effect"
import type { QueueFailureReason } from "../errors.js"
import type { TaskReport } from "../types.js"
import type { EngineState, KeyTasks, LaneState, Listener, Task } from "./state.js"
import {
  DROPPING,
  ENDED,
  failureOf,
  FINISHING,
  forgetKey,
  moreOf,
  rerank,
  stopTimer,
  touchAuto,
  WAIT_NOTIFIED
} from "./state.js"

/** What a part of a task's end returns when it finished synchronously (compared by identity). */
export const VOID: Effect.Effect<void> = Effect.void

/** A finalizer's own failure joins the task's Cause as a defect: it never adds a typed error. */
const asDefects = (cause: Cause.Cause<unknown>): Cause.Cause<never> =>
  Cause.fromReasons(
    cause.reasons.map((r) => (Cause.isFailReason(r) ? Cause.makeDieReason(r.error) : r))
  ) as Cause.Cause<never>

const callListener = (listener: Listener, exit: Exit.Exit<unknown, unknown>): void => {
  try {
    listener(exit)
  } catch {
    // a listener is the queue's own code (Promise futures, signal clean-up); it must not break settling
  }
}

/** Finalizer (bounded), release of ownership, report (bounded), then the future settles. */
export function complete(engine: EngineState, task: Task, exit: Exit.Exit<any, any>): Effect.Effect<void> {
  const finalizer = task.options?.finalizer
  if (finalizer === undefined) return conclude(engine, task, exit)
  const ms = task.laneState.limits.finalizationTimeoutMs
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
export function conclude(engine: EngineState, task: Task, exit: Exit.Exit<any, any>): Effect.Effect<void> {
  release(engine, task, exit)
  const onTaskExit = engine.options.onTaskExit
  if (onTaskExit === undefined) {
    settle(engine, task, exit)
    return VOID
  }
  const now = engine.now()
  const started = task.startedAt >= 0
  const report: TaskReport = {
    runId: task.runId,
    lane: task.laneState.name,
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
export function release(engine: EngineState, task: Task, exit: Exit.Exit<any, any>): void {
  const lane = task.laneState
  lane.owned--
  if (task.state === FINISHING) {
    lane.running--
    const ks = task.keyTasks
    if (ks !== undefined && ks.running === task) {
      ks.running = undefined
      rerank(lane, ks) // a key re-queued while its last task ended ranked first until now
      forgetKey(lane, ks)
    }
  }
  const outcome = lane.metrics.ended(exit)
  if (engine.draining) {
    if (outcome === "closed") engine.drainCanceled++
    else if (outcome === "success" || outcome === "failure" || outcome === "defect") engine.drainCompleted++
  }
  const removal = lane.removal
  if (removal !== undefined) {
    if (outcome === "closed") removal.canceled++
    else if (outcome === "success" || outcome === "failure" || outcome === "defect") removal.completed++
  }
}

/** Calls `listener` when the task settles (at once if it has). */
export function addListener(task: Task, listener: Listener): void {
  if (task.exit !== undefined) return callListener(listener, task.exit)
  const more = moreOf(task)
  const l = more.listeners
  if (l === undefined) more.listeners = listener
  else if (Array.isArray(l)) l.push(listener)
  else more.listeners = [l, listener]
}

/** The task's exit is final: complete its Deferred and listeners; wake a drain when nothing is left. */
export function settle(engine: EngineState, task: Task, exit: Exit.Exit<any, any>): void {
  task.state = ENDED
  task.exit = exit
  task.body = undefined
  task.keyTasks = undefined
  if (task.deferred !== undefined) Deferred.doneUnsafe(task.deferred, exit)
  try {
    task.onSettled(exit)
  } catch {
    // the queue's own code (the Promise API's result); it must not break settling
  }
  const more = task.more
  const listeners = more?.listeners
  if (listeners !== undefined) {
    more!.listeners = undefined
    if (Array.isArray(listeners)) { for (const l of listeners) callListener(l, exit) }
    else callListener(listeners, exit)
  }
  const lane = task.laneState
  lane.live--
  if (lane.live === 0 && lane.idle !== undefined) {
    const idle = lane.idle
    lane.idle = undefined
    Deferred.doneUnsafe(idle, Exit.void)
  }
  if (lane.auto) touchAuto(engine, lane)
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
  return log.pipe(Effect.annotateLogs({ runId: task.runId, lane: task.laneState.name, key: task.key }))
}

/** A run ended with `exit`: the task's end, then (still inside the activation) its key's follow-up. */
export function finish(
  engine: EngineState,
  lane: LaneState,
  key: string,
  task: Task,
  exit: Exit.Exit<any, any>
): Effect.Effect<void> {
  task.state = FINISHING
  let final = exit
  const more = task.more
  if (more !== undefined) {
    stopTimer(more)
    more.controller = undefined
    const stopped = more.stopped
    if (stopped !== undefined && Exit.isFailure(exit) && Cause.hasInterrupts(exit.cause)) final = Exit.fail(stopped)
  }
  task.dropHandle()
  // the key's entry stays in the map while its activation runs (the lanes hold it)
  const ks = task.keyTasks
  const rest = complete(engine, task, final)
  if (rest === VOID) return afterRun(engine, lane, ks)
  return Effect.andThen(rest, Effect.suspend(() => afterRun(engine, lane, ks)))
}

/** Still inside the activation: if the key has more tasks, a follow-up is owed (it queues at the tail). */
export function afterRun(engine: EngineState, lane: LaneState, ks: KeyTasks | undefined): Effect.Effect<void> {
  if (ks === undefined || ks.head === undefined || ks.running !== undefined || ks.cancelling) return VOID
  return wakeKey(engine, lane, ks)
}

/** Wakes a key that has tasks waiting; when the lanes closed (end of a drain), drops them `closed`. */
export function wakeKey(engine: EngineState, lane: LaneState, ks: KeyTasks): Effect.Effect<void> {
  if (typeof lane.lanes.wakeEntryUnsafe(ks) !== "string") {
    // The lanes closed (end of a drain): nothing may run any more.
    for (let t = ks.head; t !== undefined;) {
      const next = t.next
      engine.fork(drop(engine, t, "closed"))
      t = next
    }
  }
  return VOID
}

/** Stops the task's `onWait` timer (`watch.ts`); whether `onWait` was called for it while it waited. */
export function clearWaitTimer(task: Task): boolean {
  const more = task.more
  const timer = more?.waitTimer
  if (timer === undefined) return false
  more!.waitTimer = undefined
  if (timer === WAIT_NOTIFIED) return true
  timer.interruptUnsafe()
  return false
}

/** Drops a waiting task now (synchronously) and returns the rest of its end: finalizer, report, settle. */
export function drop(engine: EngineState, task: Task, reason: QueueFailureReason): Effect.Effect<void> {
  const lane = task.laneState
  const ks = task.keyTasks
  if (ks !== undefined) {
    ks.unlink(task)
    if (ks.idle && !ks.cancelling) {
      if (engine.closing) forgetKey(lane, ks)
      else dropOwedActivation(engine, lane, task.key, ks)
    }
  }
  task.state = DROPPING
  lane.waiting--
  const more = moreOf(task)
  if (more.waitTimer !== undefined) clearWaitTimer(task)
  stopTimer(more)
  const failure = failureOf(task, "queued", reason)
  more.stopped = failure
  return complete(engine, task, Exit.fail(failure))
}

/**
 * The key's tasks are all gone but its lanes entry may still owe an activation: cancel that in
 * the lanes so no idle key lingers there. Dispatches meanwhile wait; they are woken after.
 */
function dropOwedActivation(engine: EngineState, lane: LaneState, key: string, ks: KeyTasks): void {
  ks.cancelling = true
  rerank(lane, ks)
  engine.fork(Effect.andThen(
    lane.lanes.cancel(key),
    Effect.suspend(() => {
      ks.cancelling = false
      rerank(lane, ks)
      if (lane.keys.get(key) !== ks) return Effect.void
      if (ks.head !== undefined) return wakeKey(engine, lane, ks)
      forgetKey(lane, ks)
      return Effect.void
    })
  ))
}
