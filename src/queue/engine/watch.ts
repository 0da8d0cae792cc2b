/**
 * `onWait`: a task that has waited its lane's `warnAfterMs` is reported once then, and again when it
 * starts, with `queuedAhead` (the tasks of the lane that will start before it, as things stand).
 * Internal to `src/queue` (part of the engine; below it: `ahead.ts`, `end.ts` for logging, `state.ts`).
 */
import { Cause, Effect } from "effect"
import type { WaitInfo } from "../types.js"
import { queuedAhead } from "./ahead.js"
import { clearWaitTimer, warn } from "./end.js"
import type { EngineState, Task } from "./state.js"
import { moreOf, WAIT_NOTIFIED, WAITING } from "./state.js"

/** A task of a lane with `warnAfterMs`, in a queue with `onWait`, has to wait: report it when it has waited that long. */
export function armWaitTimer(engine: EngineState, task: Task): void {
  const ms = task.laneState.limits.warnAfterMs
  if (engine.options.onWait === undefined || ms === undefined || task.more?.waitTimer !== undefined) return
  const more = moreOf(task)
  more.waitTimer = engine.fork(Effect.andThen(
    Effect.sleep(ms),
    Effect.suspend(() => {
      if (task.state !== WAITING) return Effect.void
      more.waitTimer = WAIT_NOTIFIED
      return notify(engine, task, engine.now() - task.admittedAt, queuedAhead(task))
    })
  ))
}

/** The task starts: its timer goes; a task reported while it waited is reported again. */
export function waitStarted(engine: EngineState, task: Task): void {
  if (clearWaitTimer(task)) engine.fork(notify(engine, task, task.startedAt - task.admittedAt, 0))
}

/** Calls `onWait`; a throw or a failing Effect is logged as a warning and changes nothing. */
function notify(engine: EngineState, task: Task, waitedMs: number, ahead: number): Effect.Effect<void> {
  const onWait = engine.options.onWait!
  const info: WaitInfo = { runId: task.runId, lane: task.laneState.name, key: task.key, waitedMs, queuedAhead: ahead }
  let r: unknown
  try {
    r = onWait(info)
  } catch (error) {
    return warn(task, "onWait threw; ignored", Cause.die(error))
  }
  if (!Effect.isEffect(r)) return Effect.void
  return Effect.catchCause(r as Effect.Effect<unknown, unknown>, (cause) => warn(task, "onWait failed; ignored", cause))
    .pipe(Effect.asVoid)
}
