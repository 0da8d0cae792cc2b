/** The shapes of the delivery log, shared by every store (the file log, and later Postgres) and by the delivery queue. */
import type { Effect, Option } from "effect"
import type { DeliveryLogError } from "./errors.js"

/** An outbound message: what to send, to whom, over which channel. */
export interface OutboundMessage {
  /** The channel that delivers it, e.g. `"console"`, `"telegram"`. Not empty. */
  readonly channel: string
  /** The recipient within the channel. Not empty. */
  readonly to: string
  /** Any JSON value. */
  readonly body: unknown
  /** An `append` with the key of an entry that is pending, dead, or acked within `dedupeWindowMs` returns that entry. */
  readonly idempotencyKey?: string
}

/** A message held by the log, with its delivery state. */
export interface DeliveryEntry {
  /** Stable across retries and restarts: a channel may use it to drop a duplicate. */
  readonly id: string
  /** Increases with every append, never reused. */
  readonly seq: number
  readonly message: OutboundMessage
  /** Epoch ms. */
  readonly enqueuedAt: number
  readonly attempts: number
  readonly lastError?: string
  /** Epoch ms; not due before. */
  readonly nextAttemptAt?: number
  readonly status: "pending" | "dead"
  /**
   * `true` when an attempt was started (its durable "attempt started" mark is in the log) and no outcome
   * was recorded since: a crash came between the two, and the message may have been sent. A channel
   * that can look a message up (by `id`, its idempotency key) checks before sending again.
   */
  readonly maybeSent?: boolean
}

/**
 * Where a store stands: `ok`, or `failing` since `since` (epoch ms) with the last `io` error. While
 * failing, every mutating call fails fast with `error`; the store heals itself (the file log re-opens
 * through recovery with backoff, 1 s doubling to 30 s) and is `ok` again once that worked.
 */
export type DeliveryLogHealth =
  | { readonly status: "ok" }
  | { readonly status: "failing"; readonly since: number; readonly error: DeliveryLogError }

/**
 * A durable store of outbound messages. Every mutating call succeeds only once its change is durable
 * (for the file log with `fsync: "always"`: on disk); a failure is never reported as success.
 */
export interface DeliveryLog {
  readonly append: (message: OutboundMessage) => Effect.Effect<DeliveryEntry, DeliveryLogError>
  /**
   * Records a failed attempt (attempts + 1, `lastError`, `nextAttemptAt`). With `dead: true` it is the
   * last one: the same single record also moves the entry to dead (a crash cannot split the two).
   * Fails `unknown-id`, or `not-pending` for a dead entry (and leaves it: requeue it first).
   */
  readonly attempt: (
    id: string,
    failure: { readonly error: string; readonly nextAttemptAt: number; readonly dead?: boolean }
  ) => Effect.Effect<DeliveryEntry, DeliveryLogError>
  /**
   * Removes a pending entry (delivered). Fails `not-pending` for a dead entry, and leaves it. An ack of an
   * entry acked less than `dedupeWindowMs` ago succeeds and writes nothing; an id acked before that is
   * forgotten (the file log at once, the Postgres log at its next compaction) and fails `unknown-id`, as
   * an id never appended does: ids are random, so the two cannot be told apart without keeping every id.
   */
  readonly ack: (id: string) => Effect.Effect<void, DeliveryLogError>
  readonly deadLetter: (id: string, reason: string) => Effect.Effect<void, DeliveryLogError>
  /** dead -> pending, attempts back to 0. */
  readonly requeue: (id: string) => Effect.Effect<void, DeliveryLogError>
  /**
   * The durable "attempt started" mark of a pending entry, written before `deliver` is called: from
   * then until an outcome (`attempt`, `ack`, `deadLetter`, `requeue`) the entry reads `maybeSent: true`,
   * also after a re-open. Overlapping calls share a sync with everything else in flight. Fails
   * `unknown-id`, or `not-pending` for a dead entry. Optional for other stores: a queue on a log
   * without it delivers as before, and replayed entries never read `maybeSent`.
   */
  readonly markStarted?: (id: string) => Effect.Effect<void, DeliveryLogError>
  /**
   * `ack(id)` and `markStarted(next)` (the same recipient's next entry) in one call: both records are
   * staged at once and share a commit, the ack first. Succeeds and fails exactly as `ack(id)` does;
   * the mark is separate: `true` once it is durable, `false` when it failed (an `io` failure counts
   * against the store's health as any call's does). The queue calls it after a delivery when the next
   * entry is due; optional: without it, the queue runs `ack` and `markStarted` side by side.
   */
  readonly ackAndMark?: (id: string, next: string) => Effect.Effect<boolean, DeliveryLogError>
  /**
   * `append(message)`, and when it wrote a new entry, that entry's attempt-started mark (`markStarted`) in
   * the same commit: for a message the caller will attempt at once (a recipient with nothing ahead of
   * it), one sync instead of two. Succeeds and fails exactly as `append` does, with `marked`: `true` once
   * the mark is durable, `false` when none was written (an idempotency key's existing entry) or it failed
   * (an `io` failure counts against the store's health as any call's does). Optional: without it, the
   * queue appends and marks in two calls.
   */
  readonly appendAndMark?: (
    message: OutboundMessage
  ) => Effect.Effect<readonly [entry: DeliveryEntry, marked: boolean], DeliveryLogError>
  readonly get: (id: string) => Effect.Effect<Option.Option<DeliveryEntry>>
  /** Oldest first. */
  readonly pending: Effect.Effect<ReadonlyArray<DeliveryEntry>>
  readonly dead: Effect.Effect<ReadonlyArray<DeliveryEntry>>
  readonly stats: Effect.Effect<{
    readonly pending: number
    readonly dead: number
    readonly segments: number
    readonly bytes: number
  }>
  readonly flush: Effect.Effect<void, DeliveryLogError>
  readonly compact: Effect.Effect<void, DeliveryLogError>
  /** `ok`, or `failing` (since when, and the last `io` error) until the store has healed itself. */
  readonly health: Effect.Effect<DeliveryLogHealth>
}
