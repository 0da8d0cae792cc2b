/** switchyard/queue — keyed lanes, the command queue, futures, and the Promise API. */
export * from "./errors.js"
export * from "./Lanes.js"
