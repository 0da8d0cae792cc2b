/**
 * CommandQueue: named lanes over `createLanes`, Deferred-backed futures, generations and drain.
 * The contract is `shared/spec/command-queue.md`; the user guide is `docs/command-queue.md`.
 *
 * ```ts
 * const queue = yield* CommandQueue.make({ lanes: { main: { concurrent: 4, queued: 64 } } })
 * const future = yield* queue.dispatch("main", "session:42", runTurn(message))
 * const reply = yield* future.awaitTimeout("30 seconds")
 * ```
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import { makeEngine } from "./engine/Engine.js"
import { resolveOptions } from "./engine/options.js"
import { keepAlive as keepTaskAlive } from "./engine/run.js"
import { CurrentTask } from "./engine/state.js"
import type { LanesConfigInvalid } from "./errors.js"
import type { CommandQueue, CommandQueueOptions } from "./types.js"

export type {
  CommandQueue,
  CommandQueueOptions,
  DispatchOptions,
  DrainReport,
  Future,
  GroupLimits,
  GroupSnapshot,
  LaneLimits,
  LaneSnapshot,
  TaskReport,
  UnknownLaneLimits,
  WaitInfo
} from "./types.js"

/**
 * Makes a queue in the current Scope; closing the Scope drains it with `drainTimeoutMs`.
 * Fails `LanesConfigInvalid` (with the option's path as `field`) when a limit is bad.
 */
export const make = (options?: CommandQueueOptions): Effect.Effect<CommandQueue, LanesConfigInvalid, Scope.Scope> =>
  Effect.suspend(() => {
    const resolved = resolveOptions(options)
    if (!("lanes" in resolved) || resolved instanceof Error) return Effect.fail(resolved as LanesConfigInvalid)
    return makeEngine(resolved)
  })

/**
 * Inside a running task (Effect API): restarts the task's `turnTimeoutMs` from now, so a turn that
 * makes progress (a streamed model reply, chunk by chunk) is not cut while a stuck one still is.
 * Reads the running task from the fiber's context (fibers the task forks see it too); outside a
 * task, or for a task without a turn timeout, it does nothing.
 */
export const keepAlive: Effect.Effect<void> = Effect.withFiber((fiber) => {
  const task = fiber.getRef(CurrentTask)
  if (task !== undefined) keepTaskAlive(task.laneState.engine, task)
  return Effect.void
})
