/**
 * The command queue's engine, wired: one `createLanes` per lane over the state (`state.ts`), the
 * operations (`end.ts`, `run.ts`, `admit.ts`, `control.ts`), and the `CommandQueue` value the
 * Effect skin hands out. Internal to `src/queue`: `CommandQueue.make` and `createCommandQueue` are
 * its two skins. It imports every layer of `engine/`; none of them imports it.
 *
 * All state is plain and mutable, changed synchronously (no Ref round trips on the hot path). A
 * lane activation runs exactly one task of its key, then asks for a follow-up if the key has more,
 * so a busy key queues behind the keys that waited meanwhile (lanes.md fairness).
 */
import { Effect } from "effect"
import type { Context, Scope } from "effect"
import type { AdmissionError, RequestError } from "../errors.js"
import { FutureImpl } from "../Future.js"
import { createLanesInternal } from "../lanes/scheduler.js"
import type { CommandQueue } from "../types.js"
import { admit, wake } from "./admit.js"
import { cancelKey, drain, restartLane, snapshotUnsafe } from "./control.js"
import { clear, waitForIdle } from "./idle.js"
import { LaneMetrics } from "./metrics.js"
import type { ResolvedOptions } from "./options.js"
import { activator, runTask } from "./run.js"
import type { TaskOptions } from "./state.js"
import { EFFECT_BODY, EngineState, LaneState, Task, unknownLane, WAKE } from "./state.js"

const engines = new WeakMap<object, EngineState>()
/** The engine behind a queue made by `CommandQueue.make`. @internal */
export const engineOf = (queue: CommandQueue): EngineState => engines.get(queue)!

/** Builds the lanes in the current Scope and registers the drain on its closing. */
export const makeEngine = (options: ResolvedOptions): Effect.Effect<CommandQueue, never, Scope.Scope> =>
  Effect.flatMap(Effect.context<Scope.Scope>(), (context) => {
    const engine = new EngineState(context as Context.Context<never>, options, runTask)
    return Effect.gen(function*() {
      for (const [name, limits] of options.lanes) {
        const lane = new LaneState(name, limits)
        lane.engine = engine
        lane.lanes = yield* Effect.orDie(createLanesInternal<string>({
          maxConcurrent: limits.concurrent,
          activate: activator(engine, lane)
        }, { uninterruptibleWork: true, inlineWork: true }))
        engine.byName.set(name, lane)
        engine.all.push(lane)
        lane.metrics = new LaneMetrics(lane, engine.context)
      }
      // Added after the lanes: Scope finalizers run in reverse, so the drain runs before they close.
      yield* Effect.addFinalizer(() => drain(engine, undefined))
      const queue = api(engine)
      engines.set(queue, engine)
      return queue
    })
  })

/** `admit` for the Effect API: the wake, when needed, runs in the caller's fiber. */
const dispatch = (
  engine: EngineState,
  laneName: string,
  key: string,
  body: Effect.Effect<any, any, any>,
  options: TaskOptions | undefined,
  context: Context.Context<never>
): Effect.Effect<FutureImpl<any, any>, AdmissionError | RequestError> => {
  const task = admit(engine, laneName, key, body, EFFECT_BODY, options, context, false)
  if (!(task instanceof Task)) return Effect.fail(task)
  const admission = engine.admission === WAKE ? wake(engine, task) : engine.admission
  return typeof admission === "string" ? Effect.succeed(new FutureImpl(task, admission)) : Effect.fail(admission)
}

const api = (engine: EngineState): CommandQueue => ({
  dispatch: (lane, key, task, options) =>
    Effect.withFiber((fiber) => dispatch(engine, lane, key, task, options as TaskOptions | undefined, fiber.context)),
  restartLane: (lane) => restartLane(engine, lane),
  restartAll: Effect.asVoid(
    Effect.forEach(engine.all, (lane) => restartLane(engine, lane.name), {
      concurrency: "unbounded",
      discard: true
    }).pipe(Effect.orDie)
  ),
  generation: (lane) =>
    Effect.suspend(() => {
      const l = engine.byName.get(lane)
      return l === undefined ? Effect.fail(unknownLane(engine, lane, "")) : Effect.succeed(l.generation)
    }),
  cancel: (lane, key) => cancelKey(engine, lane, key),
  drain: (options) => drain(engine, options),
  snapshot: Effect.sync(() => snapshotUnsafe(engine)),
  waitForIdle: (options) => waitForIdle(engine, options),
  clear: (lane) => clear(engine, lane)
})
