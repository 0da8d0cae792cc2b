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
import { CapacityGroup } from "../lanes/group.js"
import type { CommandQueue } from "../types.js"
import { admit, wake } from "./admit.js"
import { cancelKey, drain, restartLane, snapshotUnsafe } from "./control.js"
import { clear, waitForIdle } from "./idle.js"
import { makeLane } from "./makeLane.js"
import type { ResolvedOptions } from "./options.js"
import { runTask } from "./run.js"
import {
  addLaneUnsafe,
  armSweeper,
  groupSnapshotUnsafe,
  removeLane,
  setGroupLimitsUnsafe,
  setLimitsUnsafe,
  setPausedUnsafe
} from "./runtime.js"
import type { GroupState, TaskOptions } from "./state.js"
import { EFFECT_BODY, EffectTask, EngineState, Task, unknownLane, WAKE } from "./state.js"

const engines = new WeakMap<object, EngineState>()
/** The engine behind a queue made by `CommandQueue.make`. @internal */
export const engineOf = (queue: CommandQueue): EngineState => engines.get(queue)!

/** Builds the lanes in the current Scope and registers the drain on its closing. */
export const makeEngine = (options: ResolvedOptions): Effect.Effect<CommandQueue, never, Scope.Scope> =>
  Effect.flatMap(Effect.context<Scope.Scope>(), (context) => {
    const engine = new EngineState(context as Context.Context<never>, options, runTask)
    engine.armSweeper = armSweeper
    const groupOf = new Map<string, GroupState>()
    for (const g of options.groups) {
      const group: GroupState = { name: g.name, budget: new CapacityGroup(g.name, g.concurrent), lanes: [] }
      engine.groups.set(g.name, group)
      for (const lane of g.lanes) groupOf.set(lane, group)
    }
    for (const [name, limits] of options.lanes) makeLane(engine, name, limits, groupOf.get(name))
    return Effect.gen(function*() {
      // The drain closes every lane (those added at run time too) before it reports.
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
  const task = admit(engine, laneName, key, body, EFFECT_BODY, EffectTask, options, context, false)
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
  clear: (lane) => clear(engine, lane),
  addLane: (name, limits) => fromUnsafe(() => addLaneUnsafe(engine, name, limits)),
  removeLane: (name, options) => removeLane(engine, name, options),
  setLimits: (lane, limits) => fromUnsafe(() => setLimitsUnsafe(engine, lane, limits)),
  pause: (lane) => fromUnsafe(() => setPausedUnsafe(engine, lane, true)),
  resume: (lane) => fromUnsafe(() => setPausedUnsafe(engine, lane, false)),
  groupSnapshot: Effect.sync(() => groupSnapshotUnsafe(engine)),
  setGroupLimits: (group, limits) => fromUnsafe(() => setGroupLimitsUnsafe(engine, group, limits))
})

/** A synchronous control as an Effect: its refusal is the failure. */
const fromUnsafe = (f: () => RequestError | undefined): Effect.Effect<void, RequestError> =>
  Effect.suspend(() => {
    const error = f()
    return error === undefined ? Effect.void : Effect.fail(error)
  })
