/**
 * switchyard/queue — keyed lanes, the command queue, futures, and the Promise API.
 *
 * Reading order, bottom-up (every file imports only files before it; `test/house/imports.test.ts`
 * fails on any import circle):
 * - `errors.ts` (the failures); the helpers `show.ts` (messages), `fifo.ts` (an intrusive FIFO),
 *   `longTimer.ts`; `types.ts` (the public shapes: limits, reports, snapshots, the queue, futures).
 * - `lanes/`: `types.ts` -> `config.ts` (validation) -> `entry.ts` (a key's entry) ->
 *   `keyTable.ts` (the keys' table: when an entry leaves it), `waiting.ts` (the waiting keys, which
 *   one a freed slot goes to), `starts.ts` (the start list), `activation.ts` (one activation's
 *   fiber) -> `stops.ts` (cancel, close) -> `scheduler.ts` (the transitions: one activation per key
 *   under a global cap); `Lanes.ts` (`createLanes`) on top.
 * - `engine/`, the command queue: `options.ts` (resolved limits) -> `metrics.ts` -> `taskMore.ts`
 *   (a task's states, its rare fields) -> `state.ts` (Task and its two kinds, KeyTasks — a key's
 *   tasks and its lanes entry in one —, LaneState, EngineState) -> `end.ts` (how a task ends:
 *   finalizer, report, settle; a waiting one dropped), `ahead.ts` (`queuedAhead`) -> `watch.ts`
 *   (`onWait`) -> `run.ts` (an activation runs one task; turn timers and `keepAlive`,
 *   `abortGraceMs`) -> `admit.ts` (how a task is admitted) -> `control.ts` (await, cancel, restart,
 *   drain, snapshot) -> `idle.ts` (`waitForIdle`, `clear`).
 * - `Future.ts` (the handle), `engine/Engine.ts` (wires the engine), then the two skins:
 *   `CommandQueue.ts` (Effect) and `promise.ts` (Promise), whose task is its own future
 *   (`asyncTask.ts`).
 */
import * as CommandQueueModule from "./CommandQueue.js"

// `CommandQueue` is three things under one name, so both spellings of the spec work: the module
// (`CommandQueue.make`, `CommandQueue.keepAlive`), the queue's interface as a type (`queue: CommandQueue`,
// as spec/command-queue.md's signatures write it) and a namespace of the module's types
// (`CommandQueue.CommandQueue`, `CommandQueue.LaneLimits`, ...). A type added to the module is listed in
// the namespace here too (test/house/namespaces.test.ts checks).

/** The command queue's module: `CommandQueue.make(options)` (see CommandQueue.ts). */
export const CommandQueue = CommandQueueModule
/** A running command queue: `dispatch`, `restartLane`, `drain`, `snapshot`, ... */
export type CommandQueue = CommandQueueModule.CommandQueue
// eslint-disable-next-line @typescript-eslint/no-namespace -- types only, merged with the const and type above
export declare namespace CommandQueue {
  export type CommandQueue = CommandQueueModule.CommandQueue
  export type CommandQueueOptions = CommandQueueModule.CommandQueueOptions
  export type DispatchOptions<A, E> = CommandQueueModule.DispatchOptions<A, E>
  export type DrainReport = CommandQueueModule.DrainReport
  export type Future<A, E> = CommandQueueModule.Future<A, E>
  export type GroupLimits = CommandQueueModule.GroupLimits
  export type GroupSnapshot = CommandQueueModule.GroupSnapshot
  export type LaneLimits = CommandQueueModule.LaneLimits
  export type LaneSnapshot = CommandQueueModule.LaneSnapshot
  export type TaskReport = CommandQueueModule.TaskReport
  export type UnknownLaneLimits = CommandQueueModule.UnknownLaneLimits
  export type WaitInfo = CommandQueueModule.WaitInfo
}
export type {
  CommandQueueOptions,
  DispatchOptions,
  DrainReport,
  GroupLimits,
  GroupSnapshot,
  LaneLimits,
  LaneSnapshot,
  TaskReport,
  UnknownLaneLimits,
  WaitInfo
} from "./CommandQueue.js"
export * from "./errors.js"
export type { Admission, Future } from "./Future.js"
export * from "./Lanes.js"
export { createCommandQueue } from "./promise.js"
export type { AsyncCommandQueue, AsyncDispatchOptions, AsyncFuture, AsyncPoll, TaskControl } from "./promise.js"
