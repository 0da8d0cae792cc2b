/**
 * The lanes scheduler behind `createLanes` (contract: `shared/spec/lanes.md`). Internal to
 * `src/queue`: users call `createLanes`; the command queue's engine calls `createLanesInternal`.
 *
 * All state is plain and mutable, in one closure: the table of the keys that run or owe work
 * (`keyTable.ts`), the waiting keys (`waiting.ts`), the start list of keys given a slot whose
 * activation is not forked yet (`starts.ts`), and counters. Transitions are synchronous; an
 * activation is a fiber (`activation.ts`, forked from the start list, in a microtask),
 * uninterruptible outside its work so that its end (scope closed, `onExit`, hand-off of the slot)
 * always runs. This file holds the transitions: wake, start, finish; cancel and close are in
 * `stops.ts`, on the state this closure hands them.
 */
import type { Fiber } from "effect"
import { Context, Deferred, Effect, Exit, Scope } from "effect"
import type { LaneQueueFull, LanesClosed, LanesConfigInvalid } from "../errors.js"
import type { ActivationConfig } from "./activation.js"
import { activation, callActivate } from "./activation.js"
import { validateLanesOptions } from "./config.js"
import type { Entry, InlineWork, InternalOptions, LanesInternal } from "./entry.js"
import {
  callOnExitOf,
  CLOSED_ERROR,
  IDLE,
  INLINE,
  isInlineWork,
  PENDING,
  QUEUED,
  queueFull,
  RunInline,
  RUNNING,
  STARTING,
  wakeEffect
} from "./entry.js"
import { ALONE, ALONE_FROM, KeyTable, SWEEP_SLACK } from "./keyTable.js"
import { StartList } from "./starts.js"
import type { StopHost } from "./stops.js"
import { cancelOf, closeOf } from "./stops.js"
import type { ActivationExit, LanesOptions, WakeResult } from "./types.js"
import { WaitingKeys } from "./waiting.js"

/** `createLanes`, typed with its synchronous wake (for the command queue's engine). @internal */
export const createLanesInternal = <K, E = never, R = never>(
  options: LanesOptions<K, E, R>,
  internal?: InternalOptions<K>
): Effect.Effect<LanesInternal<K>, LanesConfigInvalid, Scope.Scope | R> =>
  Effect.suspend(() => {
    const error = validateLanesOptions(options)
    if (error !== undefined) return Effect.fail(error)
    return Effect.flatMap(Effect.context<Scope.Scope | R>(), (context) => {
      const lanes = make(options, context, internal)
      return Effect.as(Effect.addFinalizer(() => lanes.close), lanes)
    })
  })

/**
 * The lanes, made now without validation and without a finalizer: the command queue's engine
 * closes them itself (a lane removed at run time leaves nothing in the queue's Scope). @internal
 */
export const makeLanesUnsafe = <K, E, R>(
  options: LanesOptions<K, E, R>,
  context: Context.Context<Scope.Scope | R>,
  internal: InternalOptions<K> | undefined
): LanesInternal<K> => make(options, context, internal)

const make = <K, E, R>(
  options: LanesOptions<K, E, R>,
  context: Context.Context<Scope.Scope | R>,
  internal: InternalOptions<K> | undefined
): LanesInternal<K> => {
  const interruptibleWork = internal?.uninterruptibleWork !== true
  const inline = internal?.inlineWork === true && !interruptibleWork && options.onExit === undefined &&
    options.turnTimeoutMs === undefined
  let maxConcurrent = options.maxConcurrent
  // `maxConcurrent`, or 0 while paused: every check reads this one number, so pause costs nothing.
  let cap = maxConcurrent
  let paused = false
  const group = internal?.group
  const maxQueued = options.maxQueued ?? Number.POSITIVE_INFINITY
  const turnTimeoutMs = options.turnTimeoutMs
  const onExit = options.onExit
  const fork = Effect.runForkWith(context as Context.Context<never>)

  const shared = internal?.entries !== undefined
  /** The keys queued for a slot (new string keys alone past `aloneFrom`, in lanes of their own: `waiting.ts`). */
  const queue = new WaitingKeys<K>(
    group,
    internal?.ranking,
    shared || group !== undefined || internal?.ranking !== undefined
      ? Number.POSITIVE_INFINITY
      : internal?.aloneFrom ?? ALONE_FROM
  )
  const aloneFrom = queue.aloneFrom
  // The keys the lanes hold (the map may be shared with the command queue's engine: `keyTable.ts`).
  const table = new KeyTable<K>(internal?.entries, SWEEP_SLACK, queue.renumber)
  queue.table = table
  // The last lookup made by `wake(key)`, valid until an entry changes hands (every acquire/release
  // clears it; never used with a shared map, which the engine changes too).
  let lookedUp = false
  let lookedUpKey: K | undefined
  let lookedUpEntry: Entry<K> | undefined
  const lookup = (key: K): Entry<K> | undefined => table.lookup(key)
  const acquire = (key: K, idle: Entry<K> | undefined): Entry<K> => {
    lookedUp = false
    return table.acquire(key, idle)
  }
  const deleteEntry = (e: Entry<K>): void => {
    lookedUp = false
    lookedUpEntry = undefined
    table.release(e)
  }
  let running = 0
  let waiting = 0
  let closed = false

  /** Takes the next queued entry off the queue and gives it a slot. */
  const startNext = (): void => {
    const e = queue.take()
    waiting--
    start(e)
  }

  /** Calls `onExit(exit)` now (see `callOnExit`). */
  const callOnExit = (exit: ActivationExit<K, E>): Effect.Effect<void> => callOnExitOf(onExit, exit)

  /** Reports `exit` through `onExit` when run. */
  const report = (exit: ActivationExit<K, E>): Effect.Effect<void> =>
    onExit === undefined ? Effect.void : Effect.suspend(() => callOnExitOf(onExit, exit))

  /** Reports the activation (now) and then lets the key move on and the slot pass on. */
  const end = (e: Entry<K>, exit: ActivationExit<K, E>): Effect.Effect<void> => {
    const reported = callOnExit(exit)
    if (reported === Effect.void) {
      finish(e)
      return Effect.void
    }
    return Effect.andThen(reported, Effect.sync(() => finish(e)))
  }

  const config: ActivationConfig<K, E> = {
    activate: options.activate,
    activateEntry: internal?.activateEntry,
    inline,
    interruptibleWork,
    turnTimeoutMs,
    fork,
    end
  }

  /**
   * Gives `e` a slot: `activate(key)` is called now (so `started` is true from here on) and its
   * Effect will run in a fiber of its own, with the lanes' context and the activation's own
   * Scope, forked from the start list right after the caller's synchronous code (a microtask).
   */
  const start = (e: Entry<K>): void => {
    e.state = RUNNING
    e.reason = undefined
    running++
    if (group !== undefined) group.running++
    e.work = callActivate(config, e)
    e.state = STARTING
    starts.add(e)
  }

  /**
   * Forks the activation fiber of a STARTING entry now; the fiber runs synchronously until it
   * first waits. An `InlineWork` runs first, as plain code: no fiber at all when it ends the
   * activation synchronously (then `undefined` is returned: the activation is over).
   */
  const forkNow = (e: Entry<K>): Fiber.Fiber<void> | undefined => {
    starts.list.unlink(e)
    e.state = RUNNING
    let work = e.work as Effect.Effect<unknown, E, Scope.Scope>
    e.work = undefined
    if (inline && isInlineWork(work)) {
      try {
        work = (work as InlineWork)[RunInline]()
      } catch (defect) {
        work = Effect.die(defect)
      }
      if (work === Effect.void) {
        finish(e)
        return undefined
      }
      if (work === PENDING) {
        e.state = INLINE // goes on without a fiber, until endInline(key)
        return undefined
      }
    }
    const scope = Scope.makeUnsafe()
    // the Scope goes into the fiber's context at fork: cheaper than provideService per activation
    const forkWithScope = Effect.runForkWith(Context.add(context, Scope.Scope, scope) as Context.Context<Scope.Scope>)
    return forkWithScope(activation(config, e, work, scope), { uninterruptible: true })
  }

  // The start list: keys given a slot whose activation fiber is not forked yet.
  const starts = new StartList<K>(forkNow)

  /** The inline activation of `key` (it returned `PENDING`) is over: the key moves on, the slot passes on. */
  const endInline = (key: K): void => {
    const e = table.peek(key)
    if (e !== undefined) endInlineEntry(e)
  }

  /** `endInline` of the key of `e` (an entry of the shared map). */
  const endInlineEntry = (e: Entry<K>, startNow?: boolean): void => {
    if (e.state !== INLINE) return
    e.state = RUNNING
    const ended = e.work as Deferred.Deferred<void> | undefined
    e.work = undefined
    // From the callback of the work's own promise (nothing else on the stack): the slot's next
    // activation starts right here, within the budget, instead of in a microtask of its own
    // (one fork, as a run's first: no clock read; any other waits for a scheduled run).
    const now = startNow === true && starts.mayRunNow
    if (now) starts.startingNow = true
    try {
      finish(e)
    } finally {
      starts.startingNow = false
    }
    if (ended !== undefined) Deferred.doneUnsafe(ended, Exit.void)
    if (now && starts.list.head !== undefined) starts.runFirst()
  }

  /** The activation of `e` has ended (Scope closed, `onExit` returned): the key moves on, the slot passes on. */
  const finish = (e: Entry<K>): void => {
    running--
    if (group !== undefined) group.running--
    e.work = undefined
    if (e.owed) {
      e.owed = false
      waiting-- // the owed follow-up becomes a queue entry, which counts again below
      queue.push(e)
      waiting++
    } else {
      deleteEntry(e)
    }
    drain()
  }

  /** Gives free slots to waiting keys (through the group, when the lanes are in one). */
  const drain = (): void => {
    if (group !== undefined) return group.pump()
    while (running < cap && queue.any) startNext()
  }

  const member = {
    startable: (): number | undefined => (running < cap && queue.head !== undefined ? queue.head.seq : undefined),
    startNext
  }
  if (group !== undefined) group.members.push(member)

  const setConcurrent = (n: number): void => {
    maxConcurrent = n
    if (!paused) cap = n
    drain()
  }

  const setPaused = (p: boolean): void => {
    paused = p
    cap = p ? 0 : maxConcurrent
    if (!p) drain()
  }

  const prioritize = (): void => queue.prioritize()
  const rerank = (e: Entry<K>): void => queue.rerank(e)

  /**
   * The state transition of one wake; synchronous, O(1), allocates only for a new entry or a
   * refusal. Returns the result, or the refusal as a value (never throws).
   */
  const wakeUnsafe = (key: K): WakeResult | LaneQueueFull | LanesClosed => {
    if (closed) return CLOSED_ERROR
    // the lookup `wake(key)` just made, when nothing changed since (one Map lookup per wake, not two)
    const e = lookedUp && lookedUpKey === key ? lookedUpEntry : table.peek(key)
    lookedUp = false
    return e === undefined || e.state === IDLE ? wakeIdle(key, e) : wakeHeld(e)
  }

  /** `wakeUnsafe` of the key of `e`, an entry of the shared map (no lookup). */
  const wakeEntryUnsafe = (e: Entry<K>): WakeResult | LaneQueueFull | LanesClosed => {
    if (closed) return CLOSED_ERROR
    return e.state === IDLE ? wakeIdle(e.key, e) : wakeHeld(e)
  }

  /** A wake of a key the lanes do not hold (`idle`: its IDLE entry in the shared map, if any). */
  const wakeIdle = (key: K, idle: Entry<K> | undefined): WakeResult | LaneQueueFull => {
    // With a slot free the queue is empty (every freed slot drains it), so the key starts now.
    // In a group the group needs a slot too; with one free, no member has a startable waiter.
    if (running < cap && (group === undefined || group.running < group.concurrent)) {
      start(acquire(key, idle))
      return "started"
    }
    if (waiting >= maxQueued) return queueFull(key, maxQueued)
    if (idle === undefined && (waiting >= aloneFrom || queue.byPlace) && typeof key === "string") {
      // behind many others: queued as the key alone, its entry made when it leaves the queue
      lookedUp = false
      queue.pushAlone(key)
    } else queue.push(acquire(key, idle))
    waiting++
    return "queued"
  }

  /** A wake of a key that is queued or running. */
  const wakeHeld = (e: Entry<K>): WakeResult | LaneQueueFull => {
    if (e.state === QUEUED || e.owed) return "coalesced"
    if (waiting >= maxQueued) return queueFull(e.key, maxQueued)
    e.owed = true
    waiting++
    return "queued"
  }

  /** `wakeUnsafe` as an Effect (constant Effects: no allocation but for a refusal). */
  const transition = (key: K): Effect.Effect<WakeResult, LaneQueueFull | LanesClosed> => wakeEffect(wakeUnsafe(key))

  const makeWake = (key: K): Effect.Effect<WakeResult, LaneQueueFull | LanesClosed> =>
    Effect.suspend(() => transition(key))

  // A key that is held (queued or running) keeps its wake Effect, so that waking it again (the
  // coalesced case) allocates nothing at all; the Effect looks the key up afresh each time it runs.
  const wake = (key: K): Effect.Effect<WakeResult, LaneQueueFull | LanesClosed> => {
    if (shared) return makeWake(key)
    const e = table.peek(key)
    if (e === ALONE) return makeWake(key) // its state changes with no entry to read it from: not kept
    lookedUp = true
    lookedUpKey = key
    lookedUpEntry = e
    if (e === undefined || e.state === IDLE) return makeWake(key)
    return e.wake ??= makeWake(key)
  }

  const stops: StopHost<K, E> = {
    table,
    queue,
    lookup,
    deleteEntry,
    forkNow,
    report,
    unwait: (n) => {
      waiting -= n
    },
    markClosed: () => {
      if (closed) return false
      closed = true
      if (group !== undefined) group.leave(member)
      return true
    }
  }
  const cancel = cancelOf(stops)
  const close = closeOf(stops)

  const stats = Effect.sync(() => ({ running, waiting, keys: table.held }))

  const queuedHead = (): Entry<K> | undefined => queue.head

  return {
    wake,
    cancel,
    close,
    stats,
    wakeUnsafe,
    wakeEntryUnsafe,
    endInline,
    endInlineEntry,
    setConcurrent,
    setPaused,
    prioritize,
    rerank,
    queuedHead
  }
}
