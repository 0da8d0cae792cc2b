/**
 * Admission: a dispatch is validated and its task admitted synchronously (or joined to a waiting
 * task, with coalesce), then its key is woken when it was idle. No Effect runs here: the hot path
 * of both skins. Internal to `src/queue` (part of the engine; below it: `end.ts`, `state.ts`).
 */
import { Effect, Exit } from "effect"
import type { Context } from "effect"
import { AdmissionError, RequestError } from "../errors.js"
import type { WakeResult } from "../lanes/types.js"
import { expected } from "../show.js"
import type { Admission } from "../types.js"
import { complete, drop } from "./end.js"
import { makeLane } from "./makeLane.js"
import { checkDispatchOptions, checkKey } from "./options.js"
import type { BodyKind, EngineState, LaneState, Task, TaskClass, TaskOptions } from "./state.js"
import {
  DROPPING,
  EFFECT_BODY,
  ENDED,
  failureOf,
  forgetKey,
  KeyTasks,
  moreOf,
  touchAuto,
  unknownLane,
  WAITING,
  WAKE
} from "./state.js"
import { armWaitTimer } from "./watch.js"

/** The process-wide task counter behind every runId. */
let runSeq = 0

/**
 * Validates and admits a task synchronously (or joins a waiting one, with coalesce). Returns the
 * task, or the refusal as a value; `engine.admission` says how it was taken (`WAKE`: the key was
 * idle, the caller must now call `wake(engine, task)`).
 */
export function admit(
  engine: EngineState,
  laneName: string,
  key: string,
  body: unknown,
  kind: BodyKind,
  make: TaskClass,
  options: TaskOptions | undefined,
  context: Context.Context<never> | undefined,
  preCanceled: boolean
): Task | AdmissionError | RequestError {
  let lane = engine.byName.get(laneName)
  if (lane === undefined && !takesAnyName(engine, laneName)) return unknownLane(engine, laneName, key)
  const badKey = checkKey(key)
  if (badKey !== undefined) return new RequestError({ lane: laneName, key: String(key), message: badKey })
  if (options !== undefined) {
    const bad = checkDispatchOptions(options)
    if (bad !== undefined) return new RequestError({ lane: laneName, key, message: bad })
  }
  if (kind === EFFECT_BODY ? !Effect.isEffect(body) : typeof body !== "function") {
    const what = kind === EFFECT_BODY ? "an Effect" : "a function"
    return new RequestError({ lane: laneName, key, message: expected("task", what, body) })
  }
  if (engine.draining || lane?.removal !== undefined) {
    return new AdmissionError({ lane: laneName, key, reason: "closed" })
  }
  // Made only for a dispatch that passed every check: a refused one leaves no lane behind.
  lane ??= autoLane(engine, laneName)
  let ks = lane.keys.get(key)
  if (!preCanceled && options?.coalesce === true && ks !== undefined && ks.tail !== undefined) {
    engine.admission = "coalesced"
    return ks.tail
  }
  if (!preCanceled && lane.owned >= lane.capacity) return new AdmissionError({ lane: laneName, key, reason: "full" })
  const task = new make(++runSeq, lane, key, lane.generation, body, engine.now(), options, context)
  lane.owned++
  lane.waiting++
  lane.live++
  engine.live++
  if (options?.priority !== undefined && options.priority !== 0 && !lane.prioritized) {
    lane.prioritized = true
    lane.lanes.prioritize()
  }
  engine.admission = "queued"
  if (preCanceled) {
    // Never enters a FIFO: it fails `canceled` (stage queued) now, finalizer and report included.
    task.state = DROPPING
    lane.waiting--
    const failure = failureOf(task, "queued", "canceled")
    moreOf(task).stopped = failure
    engine.fork(complete(engine, task, Exit.fail(failure)))
    return task
  }
  if (ks === undefined) {
    ks = new KeyTasks(key)
    lane.keys.set(key, ks)
  }
  ks.push(task)
  task.keyTasks = ks
  if (ks.head !== task || ks.running !== undefined || ks.cancelling) {
    // The key runs or owes an activation already; the one that ends next asks for a follow-up.
    armQueueTimer(engine, task)
    armWaitTimer(engine, task)
  } else {
    engine.admission = WAKE
  }
  return task
}

/**
 * With `unknownLane` every non-empty name is a lane: one no lane has yet is made on its first
 * admitted dispatch (and while the queue drains, such a dispatch is refused `closed`, as any other).
 */
function takesAnyName(engine: EngineState, name: string): boolean {
  return engine.options.unknownLane !== undefined && typeof name === "string" && name.length > 0
}

/** Makes the lane `name` with the `unknownLane` limits (`takesAnyName` said yes, the dispatch passed every check). */
function autoLane(engine: EngineState, name: string): LaneState {
  const lane = makeLane(engine, name, engine.options.unknownLane!.limits, undefined)
  lane.auto = true
  touchAuto(engine, lane)
  return lane
}

/** After `admit` left `WAKE`: wakes the task's key now (synchronously); its admission, or the refusal. */
export function wake(engine: EngineState, task: Task): Admission | AdmissionError {
  const result = task.laneState.lanes.wakeEntryUnsafe(task.keyTasks!)
  return typeof result === "string" ? woke(engine, task, result) : wakeFailed(engine, task)
}

/** The key of `task` was woken: its admission. */
function woke(engine: EngineState, task: Task, result: WakeResult): Admission {
  if (result === "started") return "started"
  armQueueTimer(engine, task)
  armWaitTimer(engine, task)
  return "queued"
}

/** The wake failed (the lanes closed): the task was never admitted. */
function wakeFailed(engine: EngineState, task: Task): AdmissionError {
  const lane = task.laneState
  const ks = task.keyTasks
  if (ks !== undefined) {
    ks.unlink(task)
    forgetKey(lane, ks)
  }
  task.state = ENDED
  lane.owned--
  lane.waiting--
  lane.live--
  engine.live--
  return new AdmissionError({ lane: lane.name, key: task.key, reason: "closed" })
}

/** A waiting task not started within its `queueTimeoutMs` is dropped `timeout`. */
function armQueueTimer(engine: EngineState, task: Task): void {
  const ms = task.options?.queueTimeoutMs ?? task.laneState.limits.queueTimeoutMs
  if (ms === undefined) return
  const more = moreOf(task)
  more.timer = engine.fork(Effect.andThen(
    Effect.sleep(ms),
    Effect.suspend(() => {
      if (task.state !== WAITING) return Effect.void
      more.timer = undefined
      return Effect.uninterruptible(drop(engine, task, "timeout"))
    })
  ))
}
