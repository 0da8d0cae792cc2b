/**
 * The public shapes of `createLanes`: its options, what `wake` did, how an activation ended, and the
 * running lanes. Imports nothing above it (re-exported by `Lanes.ts`).
 */
import type { Cause, Effect, Scope } from "effect"
import type { LaneQueueFull, LanesClosed } from "../errors.js"

/** How one activation of a key ended, or why a key's owed activation never started. */
export type ActivationExit<K, E> =
  | { readonly _tag: "ActivationSucceeded"; readonly key: K; readonly value: unknown }
  | { readonly _tag: "ActivationFailed"; readonly key: K; readonly cause: Cause.Cause<E> }
  | {
    readonly _tag: "ActivationInterrupted"
    readonly key: K
    readonly reason: "cancel" | "close" | "timeout"
    readonly started: boolean
  }

/** The options of `createLanes`; every one is validated (`LanesConfigInvalid` names the bad one). */
export interface LanesOptions<K, E = never, R = never> {
  /** Activations running at once across all keys: an integer from 1 up. */
  readonly maxConcurrent: number
  /** Keys that may wait (queued, or owing a follow-up): an integer from 0 through `MAX_QUEUED`; unbounded when absent. */
  readonly maxQueued?: number
  /**
   * An activation running longer is interrupted and reported with `reason: "timeout"`. Interruption
   * is Effect's: an uninterruptible region (or a synchronous loop) of `activate` runs to its end first.
   */
  readonly turnTimeoutMs?: number
  /** The work for one key, called when its activation gets a slot; it runs in a Scope of its own, closed before `onExit`. */
  readonly activate: (key: K) => Effect.Effect<unknown, E, R | Scope.Scope>
  /** Called, uninterruptibly, once per activation and once per dropped entry. */
  readonly onExit?: (exit: ActivationExit<K, E>) => Effect.Effect<void> | void
}

/** What `wake` did: an activation started now, one is owed, or an owed one already serves this wake. */
export type WakeResult = "started" | "queued" | "coalesced"

/** A running set of keyed lanes. */
export interface Lanes<K> {
  /** Asks for an activation of `key` that starts after this call; never waits for an activation. */
  readonly wake: (key: K) => Effect.Effect<WakeResult, LaneQueueFull | LanesClosed>
  /** Drops what `key` owes, interrupts its activation, and returns once it has ended (finalizers, `onExit`). */
  readonly cancel: (key: K) => Effect.Effect<void>
  /** Refuses later wakes, drops the queue, interrupts running activations and waits for them. Idempotent. */
  readonly close: Effect.Effect<void>
  /** Activations running, keys waiting (queued + owed follow-ups), keys holding any state. */
  readonly stats: Effect.Effect<{ readonly running: number; readonly waiting: number; readonly keys: number }>
}
