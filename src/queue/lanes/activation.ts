/**
 * One activation of the lanes: calling `activate(key)`, and the fiber that runs its Effect, closes
 * its Scope and reports how it ended. Internal to `src/queue` (below `scheduler.ts`, which gives
 * the slots and forks these fibers), and the waits of `cancel` and `close` on activations.
 */
import { Deferred, Effect, Exit, Scope } from "effect"
import type { Fiber } from "effect"
import { show } from "../show.js"
import type { Entry } from "./entry.js"
import { fiberOf, INLINE, isInlineWork, outcome, STARTING } from "./entry.js"
import type { ActivationExit } from "./types.js"

/** What the activations of one lanes scheduler share. */
export interface ActivationConfig<K, E> {
  /** `activate(key)`, or the engine's `activateEntry(e)` in its place. */
  readonly activate: (key: K) => unknown
  readonly activateEntry: ((e: Entry<K>) => unknown) | undefined
  /** `activate` may return an `InlineWork` (`InternalOptions.inlineWork`, in effect). */
  readonly inline: boolean
  /** `activate`'s Effect is interruptible (cancel, close and timeout cut it short). */
  readonly interruptibleWork: boolean
  readonly turnTimeoutMs: number | undefined
  /** Forks a fiber with the lanes' context (the turn timer). */
  readonly fork: (effect: Effect.Effect<void>) => Fiber.Fiber<void>
  /** Reports the activation (now) and then lets the key move on and the slot pass on. */
  readonly end: (e: Entry<K>, exit: ActivationExit<K, E>) => Effect.Effect<void>
}

/** Calls `activate(key)`; a throw, or a value that is not an Effect, becomes a defect of the activation. */
export const callActivate = <K, E>(
  c: ActivationConfig<K, E>,
  e: Entry<K>
): Effect.Effect<unknown, E, Scope.Scope> => {
  try {
    const r = c.activateEntry === undefined ? c.activate(e.key) : c.activateEntry(e)
    // inline work first: the command queue's activations are its tasks
    return (c.inline && isInlineWork(r)) || Effect.isEffect(r)
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
 * list (`starts.ts`), never from `wake`, so `wake` never runs an activation and chains of
 * activations never recurse.
 */
export const activation = <K, E>(
  c: ActivationConfig<K, E>,
  e: Entry<K>,
  work: Effect.Effect<unknown, E, Scope.Scope>,
  scope: Scope.Closeable
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.withFiber((self) => {
    e.work = self as Fiber.Fiber<any>
    if (e.reason !== undefined && c.interruptibleWork) {
      // cut short before its fiber first ran: activate was called, its Effect never ran
      const exit: ActivationExit<K, E> = {
        _tag: "ActivationInterrupted",
        key: e.key,
        reason: e.reason,
        started: true
      }
      return Effect.andThen(Scope.close(scope, Exit.void), Effect.suspend(() => c.end(e, exit)))
    }
    let timer: Fiber.Fiber<void> | undefined
    const turnTimeoutMs = c.turnTimeoutMs
    if (turnTimeoutMs !== undefined) {
      timer = c.fork(Effect.andThen(
        Effect.sleep(turnTimeoutMs),
        Effect.sync(() => {
          if (e.reason === undefined) e.reason = "timeout"
          self.interruptUnsafe()
        })
      ))
    }
    return Effect.flatMap(Effect.exit(c.interruptibleWork ? Effect.interruptible(work) : work), (exit) => {
      if (timer !== undefined) timer.interruptUnsafe()
      // why the lanes cut it short, if they did, as of the moment `work` ended (not later)
      const reason = e.reason
      // (the fiber is uninterruptible here, as Scope.close would make it)
      const closing = Scope.closeUnsafe(scope, exit)
      if (closing === undefined) return c.end(e, outcome(e, exit, Exit.void, reason)) // no finalizer to run
      return Effect.flatMap(Effect.exit(closing), (closed) => c.end(e, outcome(e, exit, closed, reason)))
    })
  })

/** Waits until an INLINE activation of `e` is over. */
export const awaitInline = <K>(e: Entry<K>): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (e.state !== INLINE) return Effect.void
    const ended = (e.work ??= Deferred.makeUnsafe<void>()) as Deferred.Deferred<void>
    return Deferred.await(ended)
  })

/** The INLINE activations (no fiber) among `entries`, as Effects that wait for their end. */
export const inlineEnds = <K>(entries: Iterable<Entry<K>>): Array<Effect.Effect<void>> => {
  const out: Array<Effect.Effect<void>> = []
  for (const e of entries) if (e.state === INLINE) out.push(awaitInline(e))
  return out
}

/**
 * The activations' fibers among `entries`, except the caller's own (it cannot wait for itself);
 * one given a slot but not forked yet is forked now (`forkNow`).
 */
export const runningFibers = <K>(
  entries: Iterable<Entry<K>>,
  self: Fiber.Fiber<unknown, unknown>,
  forkNow: (e: Entry<K>) => Fiber.Fiber<void> | undefined
): Array<Fiber.Fiber<void>> => {
  const out: Array<Fiber.Fiber<void>> = []
  for (const e of entries) {
    const fiber = e.state === STARTING ? forkNow(e) : fiberOf(e)
    if (fiber !== undefined && fiber !== self) out.push(fiber)
  }
  return out
}
