/**
 * The per-key entry of the lanes, their constants, and the internal types the command queue's
 * engine uses (`LanesInternal`, `InternalOptions`, `InlineWork`). Internal to `src/queue` (not
 * exported from the package).
 */
import { Cause, Effect, Exit } from "effect"
import type { Deferred, Fiber, Scope } from "effect"
import { LaneQueueFull, LanesClosed } from "../errors.js"
import type { CapacityGroup } from "./group.js"
import type { ActivationExit, Lanes, WakeResult } from "./types.js"

/**
 * What `createLanes` really returns: `Lanes` plus a synchronous `wake` for the command queue's
 * engine (it wakes keys from plain code: the Promise API's `dispatch`, the end of a task).
 * Internal to `src/queue` (not exported from the package).
 */
export interface LanesInternal<K> extends Lanes<K> {
  /** The transition of `wake(key)`, run now; the refusal is returned as a value. */
  readonly wakeUnsafe: (key: K) => WakeResult | LaneQueueFull | LanesClosed
  /** `wakeUnsafe` of the key of `e`, an entry of the shared map (`InternalOptions.entries`), without a lookup. */
  readonly wakeEntryUnsafe: (e: Entry<K>) => WakeResult | LaneQueueFull | LanesClosed
  /** Ends the activation of `key` whose inline work returned `PENDING` (nothing otherwise). */
  readonly endInline: (key: K) => void
  /** `endInline` of the key of `e`, an entry of the shared map, without a lookup. */
  readonly endInlineEntry: (e: Entry<K>, startNow?: boolean) => void
  /** A new `maxConcurrent`: a larger one starts waiting keys at once, a smaller one lets running ones finish. */
  readonly setConcurrent: (maxConcurrent: number) => void
  /** Paused: nothing starts (wakes still queue); resumed: what waits starts, as a freed slot would. */
  readonly setPaused: (paused: boolean) => void
  /** From now on a freed slot goes to the queued key ranked highest (`InternalOptions.ranking`; first in the FIFO on ties). */
  readonly prioritize: () => void
  /**
   * What `ranking` says of `e` may have changed (its next task, or whether it has one to start):
   * it is ranked again if it waits. The engine calls it for every such change.
   */
  readonly rerank: (e: Entry<K>) => void
  /**
   * The oldest key queued for a slot (the rest follow through `next`, in FIFO order), for
   * `onWait`'s `queuedAhead`; read it synchronously, the links change with the next transition.
   */
  readonly queuedHead: () => Entry<K> | undefined
}

/**
 * How a lane ranks its waiting keys once priorities are in use (given by the command queue's engine):
 * a key ranks `priority + floor((now - since) / agingMs)`, higher first. @internal
 */
export interface Ranking<K> {
  /** The priority of the key's next task; `+Infinity` for a key with nothing to start (it ranks first). */
  readonly priority: (e: Entry<K>) => number
  /** When the key's next task was admitted, on the clock of `now`. */
  readonly since: (e: Entry<K>) => number
  /** The clock, read once per pick. */
  readonly now: () => number
  /** Milliseconds of waiting that add 1 to a rank, read once per pick. */
  readonly agingMs: () => number
}

/** Options of `createLanesInternal` that users of `createLanes` never see. @internal */
export interface InternalOptions<K = unknown> {
  /** A capacity group the lanes belong to: an activation starts only when the group has a slot too. */
  readonly group?: CapacityGroup | undefined
  /**
   * What the waiting keys are ranked by once `prioritize()` was called (see `priorityIndex.ts`);
   * without it they start in FIFO order.
   */
  readonly ranking?: Ranking<K> | undefined
  /**
   * `activate`'s Effect runs uninterruptibly: cancel, close and timeout never cut it short (the
   * command queue stops its tasks itself, and a task's end must always run). Saves entering and
   * leaving an interruptible region per activation.
   */
  readonly uninterruptibleWork?: boolean
  /**
   * `activate` may return an `InlineWork` instead of an Effect (only without `onExit` and
   * `turnTimeoutMs`, and with `uninterruptibleWork`): when its turn comes it is run as plain code,
   * without a fiber or a Scope; a fiber is forked only for the Effect it returns, unless that is
   * `Effect.void` (the activation ended synchronously).
   */
  readonly inlineWork?: boolean
  /**
   * The map of entries is shared with the command queue's engine, whose per-key state lives on
   * the same objects (one map and one object per key instead of two of each): `make` makes an
   * entry (in state IDLE); the lanes delete one they are done with only when `keep(e)` is false
   * (else it stays, IDLE, and the engine deletes it once both sides are done).
   */
  /**
   * Waiting keys beyond which a new string key is queued alone, without an entry (`waiting.ts`);
   * `ALONE_FROM` by default, lower in tests. Only lanes of their own (no `entries`, `group` or `ranking`).
   */
  readonly aloneFrom?: number | undefined
  /** Called instead of `activate(key)` with the key's entry (an entry of the shared map). */
  readonly activateEntry?: ((e: Entry<K>) => unknown) | undefined
  readonly entries?: {
    readonly map: Map<K, Entry<K>>
    readonly make: (key: K) => Entry<K>
    readonly keep: (e: Entry<K>) => boolean
  } | undefined
}

/** The method of an `InlineWork`. @internal */
export const RunInline: unique symbol = Symbol.for("switchyard/Lanes/RunInline")

/**
 * Work that runs synchronously when its activation's turn comes (never in `wake`'s caller): it
 * returns what is left to do as an Effect, or `Effect.void` when the activation is over. @internal
 */
export interface InlineWork {
  readonly [RunInline]: () => Effect.Effect<unknown>
}

/**
 * What inline work returns when its activation goes on without a fiber: the work itself calls
 * `endInline(key)` once it is over (compared by identity; never run).
 */
export const PENDING: Effect.Effect<void> = Effect.die("switchyard: PENDING marks an inline activation that goes on")

export const isInlineWork = (u: unknown): u is InlineWork =>
  typeof u === "object" && u !== null && typeof (u as { [RunInline]?: unknown })[RunInline] === "function"

export type Reason = "cancel" | "close" | "timeout"

export const QUEUED = 0
/** Given a slot: `activate(key)` was called (or is being called); its fiber may not exist yet. */
export const RUNNING = 1
/** RUNNING, and waiting in the start list for its fiber to be forked (see `runStarts`). */
export const STARTING = 2
/** RUNNING as inline work that returned `PENDING`: no fiber; it ends when `endInline(key)` is called. */
export const INLINE = 3
/**
 * The lanes hold nothing for the key. An entry in this state stays in the map only when it is
 * shared with the command queue's engine, which still holds the key (`InternalOptions.entries`).
 */
export const IDLE = 4
export type EntryState = typeof QUEUED | typeof RUNNING | typeof STARTING | typeof INLINE | typeof IDLE

/**
 * Activations forked per run of the start list before the next run waits for a macrotask
 * (`setImmediate`): chains of activations that end synchronously never starve the event loop.
 */
export const START_BUDGET = 512
/**
 * Milliseconds of forks (an activation's synchronous part included) in one run of the start list
 * before the rest waits for a macrotask: a long synchronous activation holds the event loop only
 * about that long.
 */
export const START_BUDGET_MS = 4

/** One key that runs or owes work; deleted from the map the moment the key is idle. */
export class Entry<K> {
  state: EntryState = IDLE
  /** Running, and a follow-up activation is owed. */
  owed = false
  /** Why the lanes interrupt the current activation (set once per activation). */
  reason: Reason | undefined = undefined
  /** Its place in its capacity group's enqueue sequence (grouped lanes only). */
  seq = 0
  /** Links in the FIFO of queued keys (QUEUED) or in the start list (STARTING). */
  prev: Entry<K> | undefined = undefined
  next: Entry<K> | undefined = undefined
  /**
   * What its activation is, by state (one field, read through the helpers below): STARTING, the
   * Effect (or inline work) `activate(key)` returned, until its fiber is forked; RUNNING, the
   * activation's fiber, set by the fiber itself when it first runs; INLINE, the Deferred that
   * `cancel`/`close` wait on (made when one of them has to wait).
   */
  work: Effect.Effect<unknown, any, Scope.Scope> | Fiber.Fiber<void> | Deferred.Deferred<void> | undefined = undefined
  /**
   * `wake(key)` of a held key, made on its second wake, so that waking it again allocates nothing.
   * Only the entries of `createLanes` have it (`keyTable.ts` makes them); the command queue's
   * engine wakes its keys with `wakeEntryUnsafe`.
   */
  declare wake?: Effect.Effect<WakeResult, LaneQueueFull | LanesClosed> | undefined
  constructor(readonly key: K) {}
}

/** The activation fiber of `e`, once it runs. */
export const fiberOf = <K>(e: Entry<K>): Fiber.Fiber<void> | undefined =>
  e.state === RUNNING ? (e.work as Fiber.Fiber<void> | undefined) : undefined

export const STARTED: Effect.Effect<WakeResult> = Effect.succeed("started")
export const QUEUED_RESULT: Effect.Effect<WakeResult> = Effect.succeed("queued")
export const COALESCED: Effect.Effect<WakeResult> = Effect.succeed("coalesced")
export const CLOSED_ERROR = new LanesClosed()
export const CLOSED: Effect.Effect<never, LanesClosed> = Effect.fail(CLOSED_ERROR)

/**
 * A refusal is expected and typed: it is made without a JavaScript stack trace, which would cost
 * a few microseconds per refused wake (most of its price) and say nothing the tag does not.
 */
export const queueFull = (key: unknown, maxQueued: number): LaneQueueFull => {
  const limit = Error.stackTraceLimit
  Error.stackTraceLimit = 0
  try {
    return new LaneQueueFull({ key, maxQueued })
  } finally {
    Error.stackTraceLimit = limit
  }
}

const warnOnExit = (cause: Cause.Cause<unknown>): Effect.Effect<void> =>
  Effect.logWarning("switchyard lanes: onExit raised a defect; it is ignored", cause)

/** Calls `onExit(exit)` now; a throw, or a defect of the Effect it returns, is logged as a warning. */
export const callOnExitOf = <K, E>(
  onExit: ((exit: ActivationExit<K, E>) => Effect.Effect<void> | void) | undefined,
  exit: ActivationExit<K, E>
): Effect.Effect<void> => {
  if (onExit === undefined) return Effect.void
  let r: Effect.Effect<void> | void
  try {
    r = onExit(exit)
  } catch (defect) {
    return warnOnExit(Cause.die(defect))
  }
  return Effect.isEffect(r) ? Effect.catchCause(r, warnOnExit) : Effect.void
}

/** The report of a key's owed activation that was dropped before it started. */
export const dropped = <K, E>(key: K, reason: Reason): ActivationExit<K, E> => ({
  _tag: "ActivationInterrupted",
  key,
  reason,
  started: false
})

/** What the activation of `e` came to, from the exit of its Effect and of its Scope's closing. */
export const outcome = <K, E>(
  e: Entry<K>,
  exit: Exit.Exit<unknown, E>,
  closing: Exit.Exit<void>,
  reason: Reason | undefined
): ActivationExit<K, E> => {
  if (Exit.isSuccess(exit)) {
    return Exit.isSuccess(closing)
      ? { _tag: "ActivationSucceeded", key: e.key, value: exit.value }
      : { _tag: "ActivationFailed", key: e.key, cause: closing.cause as Cause.Cause<E> }
  }
  if (reason !== undefined && Cause.hasInterrupts(exit.cause)) {
    return { _tag: "ActivationInterrupted", key: e.key, reason, started: true }
  }
  return { _tag: "ActivationFailed", key: e.key, cause: exit.cause }
}

/** A wake's result as an Effect: the three results and `LanesClosed` are constant Effects (no allocation). */
export const wakeEffect = (
  r: WakeResult | LaneQueueFull | LanesClosed
): Effect.Effect<WakeResult, LaneQueueFull | LanesClosed> => {
  switch (r) {
    case "started":
      return STARTED
    case "queued":
      return QUEUED_RESULT
    case "coalesced":
      return COALESCED
    case CLOSED_ERROR:
      return CLOSED
    default:
      return Effect.fail(r)
  }
}
