/**
 * What acts on tasks from outside their activation: futures (await, poll, cancel), cancel of a
 * key, generations (restartLane), drain and snapshot. Internal to `src/queue` (part of the engine;
 * below it: `run.ts` for `stop`, `end.ts` for `drop`, `state.ts`).
 */
import { Deferred, Duration, Effect, Exit, Option } from "effect"
import { FutureTimeout, RequestError } from "../errors.js"
import type { QueueFailureReason } from "../errors.js"
import type { DrainReport, LaneSnapshot } from "../types.js"
import { drop } from "./end.js"
import { checkWaitTimeout } from "./options.js"
import { stop } from "./run.js"
import type { EngineState, KeyTasks, Task } from "./state.js"
import { CurrentTask, ENDED, keysHeld, RUNNING, unknownLane, WAITING } from "./state.js"

/** The task's Deferred, made when first needed (completed at once if the task has settled). */
export function deferredOf(task: Task): Deferred.Deferred<any, any> {
  if (task.deferred === undefined) {
    task.deferred = Deferred.makeUnsafe()
    if (task.exit !== undefined) Deferred.doneUnsafe(task.deferred, task.exit)
  }
  return task.deferred
}

/**
 * Whether `me` (a running task) awaiting `task` would wait forever: `task` is `me`, or waits behind
 * it in the same lane and key (a key runs one task at a time, in order).
 */
export function waitsForItself(me: Task | undefined, task: Task): boolean {
  return me !== undefined && me.state === RUNNING && me.key === task.key && me.laneState === task.laneState &&
    (me === task || task.state === WAITING)
}

/** The `RequestError` of a task that awaits its own lane and key. */
export function selfWait(task: Task): RequestError {
  return new RequestError({
    lane: task.laneState.name,
    key: task.key,
    message:
      `Expected to await a task of another lane or key, got ${task.runId} of lane \`${task.laneState.name}\`, key \`${task.key}\`, awaited from inside a task of that lane and key: it would wait for itself`
  })
}

/** The task's outcome, as its future's `await`; fails `RequestError` at once when awaited from its own lane and key. */
export function awaitTask(task: Task): Effect.Effect<any, any> {
  return Effect.withFiber((fiber) => {
    if (task.exit !== undefined) return task.exit
    if (waitsForItself(fiber.getRef(CurrentTask), task)) return Effect.fail(selfWait(task))
    return Deferred.await(deferredOf(task))
  })
}

/** The task's exit if it has settled; never waits. */
export function pollTask(task: Task): Effect.Effect<Option.Option<Exit.Exit<any, any>>> {
  return Effect.sync(() => Option.fromUndefinedOr(task.exit))
}

/** `awaitTask`, failing `FutureTimeout` when `timeout` passes first (the task goes on). */
export function awaitTaskTimeout(task: Task, timeout: Duration.Input): Effect.Effect<any, any> {
  return Effect.suspend(() => {
    const timeoutMs = Duration.toMillis(Duration.fromInputUnsafe(timeout))
    return Effect.timeoutOrElse(awaitTask(task), {
      duration: timeout,
      orElse: () => Effect.fail(new FutureTimeout({ runId: task.runId, timeoutMs }))
    })
  })
}

/** Waits until the task settled, whatever its outcome. */
export function awaitEnd(task: Task): Effect.Effect<void> {
  return Effect.suspend(
    () => (task.state === ENDED ? Effect.void : Effect.asVoid(Effect.exit(Deferred.await(deferredOf(task)))))
  )
}

/** Waits until every one of `tasks` settled. */
export function awaitAll(tasks: ReadonlyArray<Task>): Effect.Effect<void> {
  return Effect.forEach(tasks, (t) => awaitEnd(t), { discard: true })
}

/** Drops the task if it waits, stops it if it runs; returns once it has settled. An ended task keeps its outcome. */
export function cancelTask(engine: EngineState, task: Task): Effect.Effect<void> {
  return Effect.suspend(() => {
    switch (task.state) {
      case WAITING:
        return Effect.andThen(Effect.uninterruptible(drop(engine, task, "canceled")), awaitEnd(task))
      case RUNNING:
        stop(engine, task, "canceled")
        return awaitEnd(task)
      case ENDED:
        return Effect.void
      default:
        return awaitEnd(task)
    }
  })
}

/**
 * Stops every task of these keys that `select` picks, and returns them: waiting ones are dropped
 * now, then running ones are stopped. Waiting ones go first: stopping a running task may hand its
 * slot on at once (synchronously), and none of the tasks being stopped may take it.
 */
export function stopTasks(
  engine: EngineState,
  keys: Iterable<KeyTasks>,
  reason: QueueFailureReason,
  select?: (t: Task) => boolean
): Array<Task> {
  const all = Array.from(keys)
  const tasks: Array<Task> = []
  for (const ks of all) {
    for (let t = ks.head; t !== undefined;) {
      const next = t.next
      if (select === undefined || select(t)) {
        tasks.push(t)
        engine.fork(drop(engine, t, reason))
      }
      t = next
    }
  }
  const running: Array<Task> = []
  for (const ks of all) {
    const r = ks.running
    if (r !== undefined && (select === undefined || select(r))) running.push(r)
  }
  for (const r of running) {
    stop(engine, r, reason)
    tasks.push(r)
  }
  return tasks
}

/** Cancels every task of `key` in the lane, and returns once they all settled. */
export function cancelKey(engine: EngineState, laneName: string, key: string): Effect.Effect<void, RequestError> {
  return Effect.suspend(() => {
    const lane = engine.byName.get(laneName)
    if (lane === undefined) return Effect.fail(unknownLane(engine, laneName, key))
    const ks = lane.keys.get(key)
    if (ks === undefined) return Effect.void
    return awaitAll(stopTasks(engine, [ks], "canceled"))
  })
}

/** Bumps the lane's generation, fails every older task `stale` (waiting ones at once), returns once they settled. */
export function restartLane(engine: EngineState, laneName: string): Effect.Effect<number, RequestError> {
  return Effect.suspend(() => {
    const lane = engine.byName.get(laneName)
    if (lane === undefined) return Effect.fail(unknownLane(engine, laneName, ""))
    const generation = ++lane.generation
    const tasks = stopTasks(engine, lane.keys.values(), "stale", (t) => t.generation < generation)
    return Effect.as(awaitAll(tasks), generation)
  })
}

/** Closes admission now; the first call starts the drain, every call waits for its report. */
export function drain(
  engine: EngineState,
  options: { readonly timeoutMs?: number } | undefined
): Effect.Effect<DrainReport> {
  return Effect.suspend(() => {
    if (engine.drained === undefined) {
      const timeoutMs = options?.timeoutMs ?? engine.options.drainTimeoutMs
      const bad = checkWaitTimeout(timeoutMs)
      if (bad !== undefined) return Effect.die(new RequestError({ lane: "", key: "", message: bad }))
      engine.drained = Deferred.makeUnsafe<DrainReport>()
      engine.draining = true
      engine.fork(runDrain(engine, timeoutMs))
    }
    return Deferred.await(engine.drained)
  })
}

/** The drain itself: wait for the tasks or the deadline, fail the rest `closed`, close the lanes, report. */
export function runDrain(engine: EngineState, timeoutMs: number): Effect.Effect<void> {
  return Effect.gen(function*() {
    let timedOut = false
    if (engine.live > 0) {
      if (timeoutMs <= 0) timedOut = true
      else {
        engine.idle ??= Deferred.makeUnsafe<void>()
        const ended = yield* Effect.timeoutOption(Deferred.await(engine.idle), timeoutMs)
        timedOut = Option.isNone(ended)
      }
    }
    if (timedOut) {
      const keys = engine.all.flatMap((lane) => Array.from(lane.keys.values()))
      yield* awaitAll(stopTasks(engine, keys, "closed"))
    }
    if (engine.live > 0) {
      // Tasks dropped before the deadline still finish their finalizer and report.
      engine.idle ??= Deferred.makeUnsafe<void>()
      yield* Deferred.await(engine.idle)
    }
    engine.closing = true
    engine.sweeper?.interruptUnsafe()
    engine.sweeper = undefined
    for (const lane of engine.all) yield* lane.lanes.close
    for (const lane of engine.all) lane.metrics.unregister()
    Deferred.doneUnsafe(
      engine.drained!,
      Exit.succeed({
        completed: engine.drainCompleted,
        canceled: engine.drainCanceled,
        timedOut
      })
    )
  })
}

/** One snapshot per lane, synchronously. */
export function snapshotUnsafe(engine: EngineState): ReadonlyArray<LaneSnapshot> {
  return engine.all.map((lane): LaneSnapshot => ({
    lane: lane.name,
    participation: lane.limits.participation,
    generation: lane.generation,
    running: lane.running,
    waiting: lane.waiting,
    keys: keysHeld(lane),
    concurrent: lane.limits.concurrent,
    queued: lane.limits.queued,
    draining: engine.draining || lane.removal !== undefined,
    paused: lane.paused,
    ...(lane.group === undefined ? {} : { group: lane.group.name })
  }))
}
