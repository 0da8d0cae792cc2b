/** switchyard/delivery — the write-ahead delivery log and the delivery queue. */
export * from "./errors.js"
export type { DeliveryEntry, DeliveryLogHealth, OutboundMessage } from "./types.js"
export * as DeliveryQueue from "./DeliveryQueue.js"
export * as DeliveryLog from "./DeliveryLog.js"
