/**
 * Making a lane (at `make`, by `addLane`, or by a dispatch to an unknown name with `unknownLane`)
 * and what its scheduler ranks waiting keys by once priorities are in use. Internal to
 * `src/queue` (part of the engine; below it: `run.ts`, `metrics.ts`, `state.ts`).
 */
import type { Context, Scope } from "effect"
import type { Entry, Ranking } from "../lanes/entry.js"
import { makeLanesUnsafe } from "../lanes/scheduler.js"
import { LaneMetrics } from "./metrics.js"
import type { ResolvedLimits } from "./options.js"
import { activator, entryActivator } from "./run.js"
import type { EngineState, GroupState } from "./state.js"
import { engineHolds, KeyTasks, LaneState } from "./state.js"

/**
 * What a lane's waiting keys are ranked by once it has seen a priority other than 0: the
 * effective priority of a key's next task (the head of its FIFO), `priority + floor(waitedMs /
 * agingMs)`, higher first (ties: first in the lanes FIFO, the longest waiter). A key that has no
 * task left to start ranks first, so that its empty activation passes at once. Whatever changes
 * what this says of a waiting key calls `rerank` (`KeyTasks`, `end.ts`).
 */
const ranking = (engine: EngineState, lane: LaneState): Ranking<string> => ({
  priority: (e) => {
    const ks = e as KeyTasks
    const head = ks.head
    if (head === undefined || ks.cancelling || ks.running !== undefined) return Number.POSITIVE_INFINITY
    return head.options?.priority ?? 0
  },
  since: (e) => (e as KeyTasks).head?.admittedAt ?? 0,
  now: () => engine.now(),
  agingMs: () => lane.limits.agingMs
})

/** Makes a lane and registers it under its name (its scheduler, its metrics, its group). */
export function makeLane(
  engine: EngineState,
  name: string,
  limits: ResolvedLimits,
  group: GroupState | undefined
): LaneState {
  const lane = new LaneState(name, limits)
  lane.engine = engine
  lane.group = group
  lane.lanes = makeLanesUnsafe<string, never, never>(
    {
      maxConcurrent: limits.concurrent,
      activate: activator(engine, lane)
    },
    engine.context as Context.Context<Scope.Scope>,
    {
      uninterruptibleWork: true,
      inlineWork: true,
      activateEntry: entryActivator(engine, lane),
      // one map and one object per key for the engine and its lanes
      entries: {
        map: lane.keys as Map<string, Entry<string>>,
        make: (key) => new KeyTasks(key),
        keep: (e) => engineHolds(e as KeyTasks)
      },
      group: group?.budget,
      ranking: ranking(engine, lane)
    }
  )
  group?.lanes.push(lane)
  engine.byName.set(name, lane)
  lane.metrics = new LaneMetrics(lane, engine.context)
  return lane
}

/** The lane stops being known: no name, no group, no metrics. Its scheduler was closed (or never ran). */
export function forgetLane(engine: EngineState, lane: LaneState): void {
  if (engine.byName.get(lane.name) === lane) engine.byName.delete(lane.name)
  const group = lane.group
  if (group !== undefined) {
    const i = group.lanes.indexOf(lane)
    if (i >= 0) group.lanes.splice(i, 1)
  }
  if (lane.auto && (lane.prev !== undefined || engine.autoLanes.head === lane)) engine.autoLanes.unlink(lane)
  lane.metrics.unregister()
}
