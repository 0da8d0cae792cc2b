/**
 * switchyard/delivery — the write-ahead delivery log and the delivery queue.
 *
 * Reading order, bottom-up (every file imports only files before it, and queue):
 * - `errors.ts`, `types.ts` (the public shapes: entries, messages, the `DeliveryLog` interface);
 *   the helpers `fsError.ts`, `processIdentity.ts`.
 * - The file log: `record.ts` (framing, checksums) -> `segment.ts`, `payload.ts`, `validate.ts`,
 *   `manifest.ts`, `lockfile.ts`, `groupCommit.ts` (one writer, batched syncs), `corrupt.ts` ->
 *   the dedupe window: `idRing.ts`, `keyDigest.ts` -> `keyedRing.ts` -> `ackedWindow.ts`, with
 *   `addresses.ts` (where records are) -> `state.ts`, `framing.ts`, `checkpoint.ts` (the CHECKPOINT) ->
 *   `replay.ts` -> `recovery.ts`, `recordReader.ts` -> `compaction.ts` -> `keyedPlaces.ts`, `entryCalls.ts`
 *   (attempt, ack, dead letter, requeue, the started mark), `logClose.ts` ->
 *   `logCore.ts` (the log's engine) -> `healer.ts` -> `fileLog.ts` (Effects and a Scope) ->
 *   `DeliveryLog.ts` (public: `open`).
 * - The queue: `recipients.ts` (per-recipient FIFOs), `WakeHeap.ts`, `classify.ts`, `deliveryPolicy.ts` ->
 *   `attempts.ts` (one attempt of a head, the log calls it owes), `retries.ts`, `replayPacer.ts` ->
 *   `DeliveryQueue.ts` (public: replay, order, retries, dead letters).
 */
import * as DeliveryLogModule from "./DeliveryLog.js"
import * as DeliveryQueueModule from "./DeliveryQueue.js"

// `DeliveryLog` and `DeliveryQueue` are each three things under one name, so both spellings of the spec
// work: the module (`DeliveryLog.open`, `DeliveryQueue.make`), the interface as a type (`log:
// DeliveryLog`, as spec/delivery.md writes it), and a namespace of the module's types
// (`DeliveryLog.DeliveryLog`, `DeliveryLog.OpenOptions`, `DeliveryQueue.Options`). A type added to one
// of the modules is listed in its namespace here too (test/house/namespaces.test.ts checks).

/** The write-ahead delivery log's module: `DeliveryLog.open({ dir })` (see DeliveryLog.ts). */
export const DeliveryLog = DeliveryLogModule
/** A durable store of outbound messages: the interface every store implements. */
export type DeliveryLog = DeliveryLogModule.DeliveryLog
// eslint-disable-next-line @typescript-eslint/no-namespace -- types only, merged with the const and type above
export declare namespace DeliveryLog {
  export type DeliveryLog = DeliveryLogModule.DeliveryLog
  export type OpenOptions = DeliveryLogModule.OpenOptions
}

/** The delivery queue's module: `DeliveryQueue.make({ log, deliver })` (see DeliveryQueue.ts). */
export const DeliveryQueue = DeliveryQueueModule
/** A running delivery queue: `enqueue`, `retryDead`, `retryNow`, `idle`, `stats`. */
export type DeliveryQueue = DeliveryQueueModule.DeliveryQueue
// eslint-disable-next-line @typescript-eslint/no-namespace -- types only, merged with the const and type above
export declare namespace DeliveryQueue {
  export type Classification = DeliveryQueueModule.Classification
  export type Classify = DeliveryQueueModule.Classify
  export type DeliveryQueue = DeliveryQueueModule.DeliveryQueue
  export type Options = DeliveryQueueModule.Options
  export type Stats = DeliveryQueueModule.Stats
}
export * from "./errors.js"
export type { DeliveryEntry, DeliveryLogHealth, OutboundMessage } from "./types.js"
