/**
 * The lanes' stop transitions: `cancel(key)` (drop what a key owes, interrupt what it runs, wait
 * for its end) and `close` (drop every waiting key and owed follow-up, interrupt every activation,
 * wait for them all). Internal to `src/queue` (below `scheduler.ts`, which owns the state they
 * change and hands it over as a `StopHost`; neither is on the hot path of wake, start and finish).
 */
import { Effect, Fiber } from "effect"
import { awaitInline, inlineEnds, runningFibers } from "./activation.js"
import type { Entry } from "./entry.js"
import { dropped, fiberOf, IDLE, INLINE, QUEUED, STARTING } from "./entry.js"
import type { KeyTable } from "./keyTable.js"
import type { ActivationExit } from "./types.js"
import type { WaitingKeys } from "./waiting.js"

/** What the stop transitions need of their scheduler. */
export interface StopHost<K, E> {
  readonly table: KeyTable<K>
  readonly queue: WaitingKeys<K>
  /** The entry the lanes hold for `key`, if any. */
  readonly lookup: (key: K) => Entry<K> | undefined
  /** The lanes are done with `e`. */
  readonly deleteEntry: (e: Entry<K>) => void
  /** Forks the activation fiber of a STARTING entry now (undefined: it ended synchronously). */
  readonly forkNow: (e: Entry<K>) => Fiber.Fiber<void> | undefined
  /** Reports `exit` through `onExit` when run. */
  readonly report: (exit: ActivationExit<K, E>) => Effect.Effect<void>
  /** `n` waiting keys or owed follow-ups are gone. */
  readonly unwait: (n: number) => void
  /** Marks the lanes closed (and out of their group); false when they already were. */
  readonly markClosed: () => boolean
}

/** `cancel(key)`: see `Lanes.cancel`. */
export const cancelOf = <K, E>(host: StopHost<K, E>) => (key: K): Effect.Effect<void> =>
  Effect.withFiber((self) => {
    const e = host.lookup(key)
    if (e === undefined) return Effect.void
    if (e.state === QUEUED) {
      host.queue.unlink(e)
      host.unwait(1)
      host.deleteEntry(e)
      return Effect.uninterruptible(host.report(dropped(key, "cancel")))
    }
    const owed = e.owed
    if (owed) {
      e.owed = false
      host.unwait(1)
    }
    if (e.reason === undefined) e.reason = "cancel"
    // Given a slot but not forked yet: fork it now; it sees the reason and ends (interrupted) at once.
    const fiber = e.state === STARTING ? host.forkNow(e) : fiberOf(e)
    const dropReport = owed ? Effect.uninterruptible(host.report(dropped(key, "cancel"))) : Effect.void
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

/** `close`: see `Lanes.close`. */
export const closeOf = <K, E>(host: StopHost<K, E>): Effect.Effect<void> =>
  Effect.withFiber((self) => {
    const { table } = host
    if (!host.markClosed()) {
      const fibers = runningFibers(table.values(), self, host.forkNow)
      return Effect.andThen(Fiber.awaitAll(fibers), Effect.all(inlineEnds(table.values()), { discard: true }))
    }
    const drops: Array<K> = []
    for (const e of host.queue.takeAll()) {
      host.deleteEntry(e)
      drops.push(e.key)
    }
    host.unwait(drops.length)
    const fibers: Array<Fiber.Fiber<void>> = []
    const starting: Array<Entry<K>> = []
    for (const e of table.values()) {
      if (e.state === IDLE) continue
      if (e.owed) {
        e.owed = false
        host.unwait(1)
        drops.push(e.key)
      }
      if (e.reason === undefined) e.reason = "close"
      const fiber = fiberOf(e)
      if (fiber !== undefined) fibers.push(fiber)
      else if (e.state === STARTING) starting.push(e)
    }
    // Given a slot but not forked yet: forked now, each sees the reason and ends (interrupted) at once.
    for (const e of starting) {
      const fiber = host.forkNow(e)
      if (fiber !== undefined) fibers.push(fiber)
    }
    const others = fibers.filter((f) => f !== self)
    for (const f of others) f.interruptUnsafe(self.id)
    const reports = Effect.uninterruptible(
      Effect.forEach(drops, (key) => host.report(dropped(key, "close")), { discard: true })
    )
    // From inside an activation the caller cannot wait for itself: it is interrupted last.
    const last = others.length === fibers.length ? Effect.void : Effect.sync(() => self.interruptUnsafe(self.id))
    const inlines = inlineEnds(table.values())
    const waits = inlines.length === 0
      ? Fiber.awaitAll(others)
      : Effect.andThen(Fiber.awaitAll(others), Effect.all(inlines, { discard: true }))
    return Effect.andThen(reports, Effect.andThen(waits, last))
  })
