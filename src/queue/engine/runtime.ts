/**
 * The controls that change lanes while the queue runs: add and remove a lane, change its limits,
 * pause and resume it, change a group's budget, and the sweep that forgets idle auto lanes.
 * Internal to `src/queue` (part of the engine; below it: `control.ts`, `makeLane.ts`, `state.ts`).
 * Every `...Unsafe` runs synchronously and returns its refusal as a value (the Promise skin throws it).
 */
import { Deferred, Effect, Exit, Option } from "effect"
import { LanesConfigInvalid, RequestError } from "../errors.js"
import { expected, show } from "../show.js"
import type { DrainReport, GroupSnapshot, LaneLimits } from "../types.js"
import { awaitAll, stopTasks } from "./control.js"
import { forgetLane, makeLane } from "./makeLane.js"
import { checkWaitTimeout, PERMANENT_LANES, resolveLimitsAt } from "./options.js"
import type { EngineState, LaneState } from "./state.js"
import { unknownLane } from "./state.js"

const badLimit = (lane: string, error: LanesConfigInvalid): RequestError =>
  new RequestError({ lane, key: "", message: error.message, field: error.field })

/** Adds a lane now; a taken name or a bad limit is a `RequestError`. */
export function addLaneUnsafe(engine: EngineState, name: string, limits: LaneLimits): RequestError | undefined {
  if (typeof name !== "string" || name.length === 0) {
    return new RequestError({ lane: String(name), key: "", message: expected("name", "a non-empty string", name) })
  }
  const existing = engine.byName.get(name)
  if (existing !== undefined) {
    const why = existing.removal === undefined ? "it exists" : "it is being removed"
    return new RequestError({
      lane: name,
      key: "",
      message: `Expected \`name\` to be a lane name not in use, got \`${show(name)}\` (${why})`
    })
  }
  const resolved = resolveLimitsAt("limits", limits, undefined)
  if (resolved instanceof LanesConfigInvalid) return badLimit(name, resolved)
  makeLane(engine, name, resolved, undefined)
  return undefined
}

/** Changes the lane's limits from now on (validated as in `make`, `field` `limits.<name>`). */
export function setLimitsUnsafe(engine: EngineState, name: string, limits: unknown): RequestError | undefined {
  const lane = engine.byName.get(name)
  if (lane === undefined) return unknownLane(engine, name, "")
  const resolved = resolveLimitsAt("limits", limits, lane.limits)
  if (resolved instanceof LanesConfigInvalid) return badLimit(name, resolved)
  lane.limits = resolved
  lane.capacity = resolved.concurrent + resolved.queued
  lane.lanes.setConcurrent(resolved.concurrent)
  return undefined
}

/** Pauses (nothing starts; admission stays open) or resumes the lane. */
export function setPausedUnsafe(engine: EngineState, name: string, paused: boolean): RequestError | undefined {
  const lane = engine.byName.get(name)
  if (lane === undefined) return unknownLane(engine, name, "")
  lane.paused = paused
  lane.lanes.setPaused(paused)
  return undefined
}

/** Changes a group's budget: a larger one starts waiting tasks at once. */
export function setGroupLimitsUnsafe(engine: EngineState, name: string, limits: unknown): RequestError | undefined {
  const group = engine.groups.get(name)
  if (group === undefined) {
    const names = Array.from(engine.groups.keys(), (g) => `\`${g}\``).join(", ")
    const message = names.length === 0
      ? `Expected \`group\` to be a capacity group of the queue, got \`${show(name)}\` (it has none)`
      : `Expected \`group\` to be one of ${names}, got \`${show(name)}\``
    return new RequestError({ lane: "", key: "", message })
  }
  const concurrent = typeof limits === "object" && limits !== null
    ? (limits as Record<string, unknown>).concurrent
    : limits
  if (typeof concurrent !== "number" || !Number.isInteger(concurrent) || concurrent < 1) {
    return new RequestError({
      lane: "",
      key: "",
      message: expected("limits.concurrent", "an integer from 1 and up", concurrent),
      field: "limits.concurrent"
    })
  }
  group.budget.concurrent = concurrent
  group.budget.pump()
  return undefined
}

/** One snapshot per capacity group, synchronously. */
export function groupSnapshotUnsafe(engine: EngineState): ReadonlyArray<GroupSnapshot> {
  return Array.from(engine.groups.values(), (g): GroupSnapshot => {
    let running = 0
    let waiting = 0
    for (const lane of g.lanes) {
      running += lane.running
      waiting += lane.waiting
    }
    return { group: g.name, concurrent: g.budget.concurrent, running, waiting }
  })
}

/** Closes the lane's admission, lets its tasks end until the deadline, fails the rest `closed`, forgets it. */
export function removeLane(
  engine: EngineState,
  name: string,
  options: { readonly timeoutMs?: number } | undefined
): Effect.Effect<DrainReport, RequestError> {
  return Effect.suspend(() => {
    const lane = engine.byName.get(name)
    if (lane === undefined) return Effect.fail(unknownLane(engine, name, ""))
    if (PERMANENT_LANES.has(name)) {
      return Effect.fail(
        new RequestError({
          lane: name,
          key: "",
          message: `Expected \`lane\` to be a lane other than \`main\`, \`heartbeat\` and \`cron\`, got \`${
            show(name)
          }\``
        })
      )
    }
    if (lane.removal === undefined) {
      const timeoutMs = options?.timeoutMs ?? engine.options.drainTimeoutMs
      const bad = checkWaitTimeout(timeoutMs)
      if (bad !== undefined) return Effect.fail(new RequestError({ lane: name, key: "", message: bad }))
      lane.removal = { completed: 0, canceled: 0, done: Deferred.makeUnsafe<DrainReport>() }
      if (lane.auto && (lane.prev !== undefined || engine.autoLanes.head === lane)) engine.autoLanes.unlink(lane)
      engine.fork(runRemoval(engine, lane, timeoutMs))
    }
    return Deferred.await(lane.removal.done)
  })
}

/** Waits until every task of the lane settled. */
const laneIdle = (lane: LaneState): Effect.Effect<void> =>
  Effect.suspend(() => (lane.live === 0 ? Effect.void : Deferred.await(lane.idle ??= Deferred.makeUnsafe<void>())))

function runRemoval(engine: EngineState, lane: LaneState, timeoutMs: number): Effect.Effect<void> {
  return Effect.gen(function*() {
    let timedOut = false
    if (lane.live > 0) {
      const ended = timeoutMs <= 0 ? undefined : yield* Effect.timeoutOption(laneIdle(lane), timeoutMs)
      timedOut = ended === undefined || Option.isNone(ended)
    }
    if (timedOut) yield* awaitAll(stopTasks(engine, Array.from(lane.keys.values()), "closed"))
    yield* laneIdle(lane)
    yield* lane.lanes.close
    forgetLane(engine, lane)
    const removal = lane.removal!
    Deferred.doneUnsafe(
      removal.done,
      Exit.succeed({ completed: removal.completed, canceled: removal.canceled, timedOut })
    )
  })
}

/** Forgets the auto lanes idle for `idleMs`, and re-arms for the next one. */
export function armSweeper(engine: EngineState): void {
  const auto = engine.options.unknownLane
  const head = engine.autoLanes.head
  if (auto === undefined || head === undefined || engine.closing) {
    engine.sweeper = undefined
    return
  }
  const delay = Math.max(0, head.touchedAt + auto.idleMs - engine.clock.currentTimeMillisUnsafe())
  engine.sweeper = engine.fork(Effect.andThen(Effect.sleep(delay), Effect.sync(() => sweep(engine, auto.idleMs))))
}

function sweep(engine: EngineState, idleMs: number): void {
  const now = engine.clock.currentTimeMillisUnsafe()
  const list = engine.autoLanes
  while (list.head !== undefined && list.head.touchedAt + idleMs <= now) {
    const lane = list.head
    list.unlink(lane)
    if (lane.live === 0 && lane.keys.size === 0) {
      forgetLane(engine, lane)
    } else {
      // busy: looked at again once it could have been idle that long
      lane.touchedAt = now
      list.push(lane)
    }
  }
  armSweeper(engine)
}
