/**
 * `onWait`: a task that has waited its lane's `warnAfterMs` is reported once then, and again when it
 * starts, with `queuedAhead` (the tasks of the lane that will start before it, as things stand).
 * Internal to `src/queue` (part of the engine; below it: `end.ts` for logging, `state.ts`).
 */
import { Cause, Effect } from "effect"
import type { WaitInfo } from "../types.js"
import { clearWaitTimer, warn } from "./end.js"
import type { EngineState, LaneState, Task } from "./state.js"
import { WAIT_NOTIFIED, WAITING } from "./state.js"

/** A task of a lane with `warnAfterMs`, in a queue with `onWait`, has to wait: report it when it has waited that long. */
export function armWaitTimer(engine: EngineState, task: Task): void {
  const ms = task.lane.limits.warnAfterMs
  if (engine.options.onWait === undefined || ms === undefined || task.waitTimer !== undefined) return
  task.waitTimer = engine.fork(Effect.andThen(
    Effect.sleep(ms),
    Effect.suspend(() => {
      if (task.state !== WAITING) return Effect.void
      task.waitTimer = WAIT_NOTIFIED
      return notify(engine, task, engine.clock.currentTimeMillisUnsafe() - task.admittedAt, queuedAhead(task))
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
  const info: WaitInfo = { runId: task.runId, lane: task.lane.name, key: task.key, waitedMs, queuedAhead: ahead }
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

/**
 * The tasks of the lane that will start before `task`, following the lane's start order: a key gets
 * one start per turn, keys take turns in the order the lanes queue them, and a key that runs now
 * (or has just been handed a slot) comes after those, in the order its tasks were admitted; a key
 * runs its own tasks in admission order. O(tasks waiting in the lane); only `onWait` asks.
 */
export function queuedAhead(task: Task): number {
  const lane = task.lane
  const mine = lane.keys.get(task.key)
  if (mine === undefined) return 0
  let index = 0
  for (let t = mine.head; t !== undefined && t !== task; t = t.next) index++
  // turn order: the queued keys, then the keys that run (their follow-up will queue at the tail)
  const order: Array<string> = []
  const seen = new Set<string>()
  for (const key of lane.lanes.queuedKeys()) {
    if (!seen.has(key)) {
      seen.add(key)
      order.push(key)
    }
  }
  for (const [key, ks] of lane.keys) {
    if (!seen.has(key) && ks.head !== undefined) {
      seen.add(key)
      order.push(key)
    }
  }
  let ahead = index
  let before = true
  for (const key of order) {
    if (key === task.key) {
      before = false
      continue
    }
    const waiting = countWaiting(lane, key)
    // keys before mine in a turn start in rounds 0..index, keys after it in rounds 0..index-1
    ahead += Math.min(waiting, before ? index + 1 : index)
  }
  return ahead
}

const countWaiting = (lane: LaneState, key: string): number => {
  let n = 0
  for (let t = lane.keys.get(key)?.head; t !== undefined; t = t.next) n++
  return n
}
