/** The delivery queue's public shapes: its options, its stats and the running queue. */
import type { Effect } from "effect"
import type { Classify } from "./classify.js"
import type { DeliveryFailure, DeliveryLogError } from "./errors.js"
import type { DeliveryEntry, DeliveryLog, OutboundMessage } from "./types.js"

/** Options of `DeliveryQueue.make`. Defaults: `concurrency` 8, `attemptTimeoutMs` 30 s, `backoffMs` 5 s, 25 s, 2 min, 10 min, `jitter` 0.2, `maxAttempts` 5. */
export interface Options {
  readonly log: DeliveryLog
  /** Sends one entry. Fail with `DeliveryFailure` (`permanent: true` to give up at once); a defect counts as a failure too. */
  readonly deliver: (entry: DeliveryEntry) => Effect.Effect<void, DeliveryFailure>
  /** Recipients in flight at once. */
  readonly concurrency?: number
  /** An attempt running longer is interrupted and counts as a failure. `Infinity` turns the bound off. */
  readonly attemptTimeoutMs?: number
  /** Delay before the next attempt after the n-th failure: `backoffMs[n - 1]`, the last value repeating. */
  readonly backoffMs?: ReadonlyArray<number>
  /** Each delay is scaled by a uniform factor in `[1 - jitter, 1 + jitter]`. From 0 through 1. */
  readonly jitter?: number
  /** An entry whose attempts reach this number goes to the dead letters. */
  readonly maxAttempts?: number
  /**
   * Decides for every failure (a `DeliveryFailure`, a defect, a timeout) whether it is permanent and
   * whether the other side asked for a delay. Default: `DeliveryQueue.defaultClassify`.
   */
  readonly classify?: Classify
  /** An entry still pending this long (ms) after `enqueuedAt` goes to dead without another attempt, `lastError` "expired". */
  readonly maxAgeMs?: number
  /**
   * Pacing of what the log held at start: at most `maxPerSecond` replayed entries begin an attempt each
   * second, and after `maxRecoveryMs` replay starts no more old entries (they stay pending; new messages
   * wait only for their own recipient's older ones, which then go first).
   */
  readonly replay?: { readonly maxPerSecond?: number; readonly maxRecoveryMs?: number }
}

/** What `DeliveryQueue.stats` reports. */
export interface Stats {
  /** Entries pending in the log (due or waiting for their backoff). */
  readonly pending: number
  /** Entries in the dead letters. */
  readonly dead: number
  /** `deliver` calls running now. */
  readonly inFlight: number
  /** Entries this queue delivered and acked since `make`. */
  readonly delivered: number
}

/** A running delivery queue over a `DeliveryLog`. */
export interface DeliveryQueue {
  /**
   * Appends the message to the log and returns once it is durable; delivery happens in the background.
   * Not interruptible once started (an appended entry is always scheduled); concurrent enqueues are
   * scheduled in seq order.
   */
  readonly enqueue: (message: OutboundMessage) => Effect.Effect<DeliveryEntry, DeliveryLogError>
  /** Puts the dead entry `id` (or every dead entry) back to pending with attempts 0; returns how many. */
  readonly retryDead: (id?: string) => Effect.Effect<number, DeliveryLogError>
  /**
   * Makes every pending entry matching `filter` (by `channel` and/or `to`; all when omitted) due now,
   * skipping its backoff and replay pacing (a channel that reconnected); returns how many. In-flight
   * entries are not counted. The log keeps its `nextAttemptAt` (a restart waits for it again).
   */
  readonly retryNow: (filter?: { readonly channel?: string; readonly to?: string }) => Effect.Effect<number>
  /** Waits until nothing pending is due or in flight (entries waiting for a later backoff do not count). */
  readonly idle: Effect.Effect<void>
  readonly stats: Effect.Effect<Stats>
}
