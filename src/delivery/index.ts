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
export * as DeliveryLog from "./DeliveryLog.js"
export * as DeliveryQueue from "./DeliveryQueue.js"
export * from "./errors.js"
export type { DeliveryEntry, DeliveryLogHealth, OutboundMessage } from "./types.js"
