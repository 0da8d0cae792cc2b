/** switchyard/queue — keyed lanes, the command queue, futures, and the Promise API. */
export * from "./errors.js"
export * from "./Lanes.js"
export * as CommandQueue from "./CommandQueue.js"
export type {
  CommandQueueOptions,
  DispatchOptions,
  DrainReport,
  LaneLimits,
  LaneSnapshot,
  TaskReport
} from "./CommandQueue.js"
export type { Admission, Future } from "./Future.js"
export { createCommandQueue } from "./promise.js"
export type { AsyncCommandQueue, AsyncDispatchOptions, AsyncFuture, AsyncPoll } from "./promise.js"
