/**
 * The lanes scheduler behind `createLanes` (contract: `shared/spec/lanes.md`). Internal to
 * `src/queue`: users call `createLanes`; the command queue's engine calls `createLanesInternal`.
 *
 * All state is plain and mutable, in one closure: a `Map` of the keys that run or owe work, an
 * intrusive FIFO of queued entries (O(1) unlink), a start list of keys given a slot whose
 * activation is not forked yet, and counters. Transitions are synchronous; an activation is a
 * fiber (forked from the start list, in a microtask), uninterruptible outside its work so that
 * its end (scope closed, `onExit`, hand-off of the slot) always runs.
 */
import { Context, Deferred, Effect, Exit, Fiber, Scope } from "effect"
import type { LaneQueueFull, LanesClosed, LanesConfigInvalid } from "../errors.js"
import { Fifo } from "../fifo.js"
import { show } from "../show.js"
import { validateLanesOptions } from "./config.js"
import type { Entry, InlineWork, InternalOptions, LanesInternal } from "./entry.js"
import {
  callOnExitOf,
  CLOSED_ERROR,
  dropped,
  fiberOf,
  IDLE,
  INLINE,
  isInlineWork,
  outcome,
  PENDING,
  QUEUED,
  queueFull,
  RunInline,
  RUNNING,
  START_BUDGET,
  START_BUDGET_MS,
  STARTING,
  wakeEffect
} from "./entry.js"
import { KeyTable } from "./keyTable.js"
import type { ActivationExit, LanesOptions, WakeResult } from "./types.js"

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

const RESOLVED: Promise<void> = Promise.resolve()
// Node's global `performance` is a lazy getter, run on every read: read it once.
const perf = performance

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
  const rank = internal?.rank
  let prioritized = false
  const maxQueued = options.maxQueued ?? Number.POSITIVE_INFINITY
  const turnTimeoutMs = options.turnTimeoutMs
  const activate = options.activate
  const onExit = options.onExit
  const fork = Effect.runForkWith(context as Context.Context<never>)

  // The keys the lanes hold (the map may be shared with the command queue's engine: `keyTable.ts`).
  const table = new KeyTable<K>(internal?.entries)
  const shared = internal?.entries !== undefined
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
  /** The keys queued for a slot, oldest first. */
  const queue = new Fifo<Entry<K>>()
  let running = 0
  let waiting = 0
  let closed = false

  const enqueue = (e: Entry<K>): void => {
    e.state = QUEUED
    if (group !== undefined) e.seq = ++group.seq
    queue.push(e)
  }

  /** The queued entry a freed slot goes to: the FIFO's head, or the highest ranked (first on ties). */
  const next = (): Entry<K> => {
    let best = queue.head!
    if (!prioritized || rank === undefined) return best
    const rankOf = rank()
    let bestRank = rankOf(best.key)
    for (let e = best.next; e !== undefined; e = e.next) {
      const r = rankOf(e.key)
      if (r > bestRank) {
        best = e
        bestRank = r
      }
    }
    return best
  }

  /** Takes the next queued entry off the FIFO and gives it a slot. */
  const startNext = (): void => {
    const e = next()
    queue.unlink(e)
    waiting--
    start(e)
  }

  /** Calls `onExit(exit)` now (see `callOnExit`). */
  const callOnExit = (exit: ActivationExit<K, E>): Effect.Effect<void> => callOnExitOf(onExit, exit)

  /** Reports `exit` through `onExit` when run. */
  const report = (exit: ActivationExit<K, E>): Effect.Effect<void> =>
    onExit === undefined ? Effect.void : Effect.suspend(() => callOnExitOf(onExit, exit))

  const activateEntry = internal?.activateEntry

  /** Calls `activate(key)`; a throw, or a value that is not an Effect, becomes a defect of the activation. */
  const callActivate = (e: Entry<K>): Effect.Effect<unknown, E, Scope.Scope> => {
    try {
      const r = activateEntry === undefined ? activate(e.key) : activateEntry(e)
      // inline work first: the command queue's activations are its tasks
      return (inline && isInlineWork(r)) || Effect.isEffect(r)
        ? (r as Effect.Effect<unknown, E, Scope.Scope>)
        : Effect.die(new TypeError(`activate must return an Effect, got ${show(r)}`))
    } catch (defect) {
      return Effect.die(defect)
    }
  }

  /**
   * The whole life of one activation, in a fiber that is uninterruptible outside `work`: run
   * `work` (the Effect `activate` returned; its Scope is `scope`), take its outcome before the
   * Scope closes, close the Scope, report, hand the slot on. The fiber is forked from the start
   * list (`runStarts`), never from `wake`, so `wake` never runs an activation and chains of
   * activations never recurse.
   */
  const activation = (
    e: Entry<K>,
    work: Effect.Effect<unknown, E, Scope.Scope>,
    scope: Scope.Closeable
  ): Effect.Effect<void, never, Scope.Scope> =>
    Effect.withFiber((self) => {
      e.work = self as Fiber.Fiber<any>
      if (e.reason !== undefined && interruptibleWork) {
        // cut short before its fiber first ran: activate was called, its Effect never ran
        const exit: ActivationExit<K, E> = {
          _tag: "ActivationInterrupted",
          key: e.key,
          reason: e.reason,
          started: true
        }
        return Effect.andThen(Scope.close(scope, Exit.void), Effect.suspend(() => end(e, exit)))
      }
      let timer: Fiber.Fiber<void> | undefined
      if (turnTimeoutMs !== undefined) {
        timer = fork(Effect.andThen(
          Effect.sleep(turnTimeoutMs),
          Effect.sync(() => {
            if (e.reason === undefined) e.reason = "timeout"
            self.interruptUnsafe()
          })
        ))
      }
      return Effect.flatMap(Effect.exit(interruptibleWork ? Effect.interruptible(work) : work), (exit) => {
        if (timer !== undefined) timer.interruptUnsafe()
        // why the lanes cut it short, if they did, as of the moment `work` ended (not later)
        const reason = e.reason
        // (the fiber is uninterruptible here, as Scope.close would make it)
        const closing = Scope.closeUnsafe(scope, exit)
        if (closing === undefined) return end(e, outcome(e, exit, Exit.void, reason)) // no finalizer to run
        return Effect.flatMap(Effect.exit(closing), (closed) => end(e, outcome(e, exit, closed, reason)))
      })
    })

  /** Reports the activation (now) and then lets the key move on and the slot pass on. */
  const end = (e: Entry<K>, exit: ActivationExit<K, E>): Effect.Effect<void> => {
    const reported = callOnExit(exit)
    if (reported === Effect.void) {
      finish(e)
      return Effect.void
    }
    return Effect.andThen(reported, Effect.sync(() => finish(e)))
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
    e.work = callActivate(e)
    e.state = STARTING
    starts.push(e)
    if (!startScheduled && !startingNow) {
      startScheduled = true
      // a reaction on a settled promise: a microtask without `queueMicrotask`'s AsyncResource and bound function
      if (startedSinceMacrotask < START_BUDGET) void RESOLVED.then(runStartsInMicrotask)
      else setImmediate(runStartsAfterMacrotask)
    }
  }

  // The start list: keys given a slot whose activation fiber is not forked yet.
  const starts = new Fifo<Entry<K>>()
  let startScheduled = false
  let startedSinceMacrotask = 0

  /**
   * Forks the activation fiber of a STARTING entry now; the fiber runs synchronously until it
   * first waits. An `InlineWork` runs first, as plain code: no fiber at all when it ends the
   * activation synchronously (then `undefined` is returned: the activation is over).
   */
  const forkNow = (e: Entry<K>): Fiber.Fiber<void> | undefined => {
    starts.unlink(e)
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
    return forkWithScope(activation(e, work, scope), { uninterruptible: true })
  }

  /**
   * Forks the activations waiting in the start list, oldest first, in one loop (an activation
   * that ends synchronously hands its slot on by appending to this list, never by recursing).
   * After `START_BUDGET` forks since the last macrotask, or `START_BUDGET_MS` of forks in this
   * run, the rest waits for a `setImmediate` (a long synchronous activation holds the event loop
   * only about that long).
   */
  let inRunStarts = false
  let startingNow = false
  const runStarts = (): void => {
    startScheduled = false
    const runStartedAt = perf.now()
    let first = true
    inRunStarts = true
    try {
      while (starts.head !== undefined) {
        if (startedSinceMacrotask >= START_BUDGET || (!first && perf.now() - runStartedAt >= START_BUDGET_MS)) {
          startScheduled = true
          setImmediate(runStartsAfterMacrotask)
          return
        }
        first = false
        startedSinceMacrotask++
        forkNow(starts.head)
      }
    } finally {
      inRunStarts = false
    }
  }

  /** `runStarts` as a promise reaction: a throw (a bug) is reported as uncaught, as `queueMicrotask` would. */
  const runStartsInMicrotask = (): void => {
    try {
      runStarts()
    } catch (defect) {
      queueMicrotask(() => {
        throw defect
      })
    }
  }

  const runStartsAfterMacrotask = (): void => {
    startedSinceMacrotask = 0
    runStarts()
  }

  /** The inline activation of `key` (it returned `PENDING`) is over: the key moves on, the slot passes on. */
  const endInline = (key: K): void => {
    const e = table.get(key)
    if (e !== undefined) endInlineEntry(e)
  }

  /** `endInline` of the key of `e` (an entry of the shared map). */
  const endInlineEntry = (e: Entry<K>, startNow?: boolean): void => {
    if (e.state !== INLINE) return
    e.state = RUNNING
    const ended = e.work as Deferred.Deferred<void> | undefined
    e.work = undefined
    // From the callback of the work's own promise (nothing else on the stack): the slot's next
    // activation starts right here, within the budget, instead of in a microtask of its own.
    const now = startNow === true && !inRunStarts && !startScheduled && startedSinceMacrotask < START_BUDGET
    if (now) startingNow = true
    try {
      finish(e)
    } finally {
      startingNow = false
    }
    if (ended !== undefined) Deferred.doneUnsafe(ended, Exit.void)
    if (now && starts.head !== undefined) runStarts()
  }

  /** Waits until an INLINE activation of `e` is over. */
  const awaitInline = (e: Entry<K>): Effect.Effect<void> =>
    Effect.suspend(() => {
      if (e.state !== INLINE) return Effect.void
      const ended = (e.work ??= Deferred.makeUnsafe<void>()) as Deferred.Deferred<void>
      return Deferred.await(ended)
    })

  /** The INLINE activations (no fiber) as Effects that wait for their end. */
  const inlineEnds = (): Array<Effect.Effect<void>> => {
    const out: Array<Effect.Effect<void>> = []
    for (const e of table.values()) if (e.state === INLINE) out.push(awaitInline(e))
    return out
  }

  /** The activation of `e` has ended (Scope closed, `onExit` returned): the key moves on, the slot passes on. */
  const finish = (e: Entry<K>): void => {
    running--
    if (group !== undefined) group.running--
    e.work = undefined
    if (e.owed) {
      e.owed = false
      waiting-- // the owed follow-up becomes a queue entry, which counts again below
      enqueue(e)
      waiting++
    } else {
      deleteEntry(e)
    }
    drain()
  }

  /** Gives free slots to waiting keys (through the group, when the lanes are in one). */
  const drain = (): void => {
    if (group !== undefined) return group.pump()
    while (running < cap && queue.head !== undefined) startNext()
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

  const prioritize = (): void => {
    prioritized = true
  }

  /**
   * The state transition of one wake; synchronous, O(1), allocates only for a new entry or a
   * refusal. Returns the result, or the refusal as a value (never throws).
   */
  const wakeUnsafe = (key: K): WakeResult | LaneQueueFull | LanesClosed => {
    if (closed) return CLOSED_ERROR
    // the lookup `wake(key)` just made, when nothing changed since (one Map lookup per wake, not two)
    const e = lookedUp && lookedUpKey === key ? lookedUpEntry : table.get(key)
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
    enqueue(acquire(key, idle))
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
    const e = table.get(key)
    lookedUp = true
    lookedUpKey = key
    lookedUpEntry = e
    if (e === undefined || e.state === IDLE) return makeWake(key)
    return e.wake ??= makeWake(key)
  }

  const cancel = (key: K): Effect.Effect<void> =>
    Effect.withFiber((self) => {
      const e = lookup(key)
      if (e === undefined) return Effect.void
      if (e.state === QUEUED) {
        queue.unlink(e)
        waiting--
        deleteEntry(e)
        return Effect.uninterruptible(report(dropped(key, "cancel")))
      }
      const owed = e.owed
      if (owed) {
        e.owed = false
        waiting--
      }
      if (e.reason === undefined) e.reason = "cancel"
      // Given a slot but not forked yet: fork it now; it sees the reason and ends (interrupted) at once.
      const fiber = e.state === STARTING ? forkNow(e) : fiberOf(e)
      const dropReport = owed ? Effect.uninterruptible(report(dropped(key, "cancel"))) : Effect.void
      // inline work that goes on without a fiber: it cannot be interrupted, the caller waits for its end
      if (e.state === INLINE) return Effect.andThen(dropReport, awaitInline(e))
      if (fiber === undefined) return dropReport // only from inside activate(key) itself, before its fiber exists
      if (fiber === self) {
        // From inside its own activation the caller cannot wait for itself: the report comes
        // first, then the interruption, which takes effect once the activation is interruptible.
        return Effect.andThen(dropReport, Effect.sync(() => self.interruptUnsafe(self.id)))
      }
      fiber.interruptUnsafe(self.id) // may run the activation's end synchronously, right here
      return Effect.andThen(dropReport, Effect.asVoid(Fiber.await(fiber)))
    })

  /** The running activations' fibers, except the caller's own (it cannot wait for itself). */
  const runningFibers = (self: Fiber.Fiber<unknown, unknown>): Array<Fiber.Fiber<void>> => {
    const out: Array<Fiber.Fiber<void>> = []
    for (const e of table.values()) {
      const fiber = e.state === STARTING ? forkNow(e) : fiberOf(e)
      if (fiber !== undefined && fiber !== self) out.push(fiber)
    }
    return out
  }

  const close: Effect.Effect<void> = Effect.withFiber((self) => {
    if (closed) {
      const fibers = runningFibers(self)
      return Effect.andThen(Fiber.awaitAll(fibers), Effect.all(inlineEnds(), { discard: true }))
    }
    closed = true
    if (group !== undefined) group.leave(member)
    const drops: Array<K> = []
    for (let e = queue.head; e !== undefined;) {
      const next = e.next
      e.prev = undefined
      e.next = undefined
      deleteEntry(e)
      drops.push(e.key)
      e = next
    }
    queue.head = undefined
    queue.tail = undefined
    waiting -= drops.length
    const fibers: Array<Fiber.Fiber<void>> = []
    const starting: Array<Entry<K>> = []
    for (const e of table.values()) {
      if (e.state === IDLE) continue
      if (e.owed) {
        e.owed = false
        waiting--
        drops.push(e.key)
      }
      if (e.reason === undefined) e.reason = "close"
      const fiber = fiberOf(e)
      if (fiber !== undefined) fibers.push(fiber)
      else if (e.state === STARTING) starting.push(e)
    }
    // Given a slot but not forked yet: forked now, each sees the reason and ends (interrupted) at once.
    for (const e of starting) {
      const fiber = forkNow(e)
      if (fiber !== undefined) fibers.push(fiber)
    }
    const others = fibers.filter((f) => f !== self)
    for (const f of others) f.interruptUnsafe(self.id)
    const reports = Effect.uninterruptible(
      Effect.forEach(drops, (key) => report(dropped(key, "close")), { discard: true })
    )
    // From inside an activation the caller cannot wait for itself: it is interrupted last.
    const last = others.length === fibers.length ? Effect.void : Effect.sync(() => self.interruptUnsafe(self.id))
    const inlines = inlineEnds()
    const waits = inlines.length === 0
      ? Fiber.awaitAll(others)
      : Effect.andThen(Fiber.awaitAll(others), Effect.all(inlines, { discard: true }))
    return Effect.andThen(reports, Effect.andThen(waits, last))
  })

  const stats = Effect.sync(() => ({ running, waiting, keys: table.held }))

  const queuedKeys = (): Array<K> => {
    const out: Array<K> = []
    for (let e = queue.head; e !== undefined; e = e.next) out.push(e.key)
    return out
  }

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
    queuedKeys
  }
}
