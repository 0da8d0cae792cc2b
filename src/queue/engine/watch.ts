/**
 * `onWait`: a task that has waited its lane's `warnAfterMs` is reported once then, and again when it
 * starts, with `queuedAhead` (the tasks of the lane that will start before it, as things stand).
 * Internal to `src/queue` (part of the engine; below it: `end.ts` for logging, `state.ts`).
 */
import { Cause, Effect } from "effect"
import type { WaitInfo } from "../types.js"
import { clearWaitTimer, warn } from "./end.js"
import type { EngineState, LaneState, Task } from "./state.js"
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

/** A task's effective priority at `now`, as the lanes rank a key's head (`rankOf` in makeLane.ts). */
const rankAt = (lane: LaneState, t: Task, now: number): number =>
  (t.options?.priority ?? 0) + Math.floor((now - t.admittedAt) / lane.limits.agingMs)

/**
 * The tasks of the lane that will start before `task`, by replaying the lane's start rule on what
 * waits now: keys take turns in the order the lanes queue them (a key that runs now queues its
 * follow-up at the tail, after those), one start per turn, a key's own tasks in admission order;
 * once the lane has seen a priority, each turn goes to the key whose next task ranks highest
 * (`priority + floor(waitedMs / agingMs)`, as of now; ties: first in that order). Later
 * admissions, aging and a group's other lanes can still change it. O(tasks waiting, times keys
 * with priorities); only `onWait` asks.
 */
export function queuedAhead(task: Task): number {
  const lane = task.laneState
  // turn order: the queued keys, then the keys that run (their follow-up will queue at the tail)
  const turns: Array<Task> = []
  const seen = new Set<string>()
  const take = (key: string): void => {
    if (seen.has(key)) return
    seen.add(key)
    const ks = lane.keys.get(key)
    if (ks?.head !== undefined) turns.push(ks.head)
  }
  for (const key of lane.lanes.queuedKeys()) take(key)
  for (const key of lane.keys.keys()) take(key)
  const now = lane.engine.now()
  let ahead = 0
  // `turns` holds each key's next task, in turn order; a key that takes its turn goes to the tail
  for (let i = 0; i < turns.length; i++) {
    let best = i
    if (lane.prioritized) {
      let bestRank = rankAt(lane, turns[i]!, now)
      for (let j = i + 1; j < turns.length; j++) {
        const r = rankAt(lane, turns[j]!, now)
        if (r > bestRank) {
          best = j
          bestRank = r
        }
      }
    }
    const t = turns[best]!
    if (t === task) return ahead
    ahead++
    turns.splice(best, 1)
    turns.splice(i, 0, t)
    if (t.next !== undefined) turns.push(t.next)
  }
  return ahead
}
