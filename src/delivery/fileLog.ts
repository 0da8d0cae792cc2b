/**
 * The segmented file log as a `DeliveryLog`: Effects over `LogCore`, a Scope that flushes and
 * releases the lock, a background fiber for automatic compaction (with backoff after a failure), and
 * self-healing: after a failed write the log re-opens itself through recovery (see `healer.ts`).
 */
import { Clock, Effect, Fiber, Latch, Option, type Scope } from "effect"
import type { CompactionHooks } from "./compaction.js"
import { DeliveryLogError } from "./errors.js"
import { makeHealer } from "./healer.js"
import type { AppendDone } from "./inflight.js"
import { type Done, LogCore } from "./logCore.js"
import type { DeliveryEntry, DeliveryLog } from "./types.js"
import { type OpenOptions, resolveOptions } from "./validate.js"

/** Backoff of automatic compaction after a failure: 1 s doubling, at most 5 min. */
export const COMPACTION_RETRY_MS = { first: 1_000, max: 300_000 } as const

const asLogError = (o: { readonly dir: string }, what: string) => (e: unknown): DeliveryLogError =>
  e instanceof DeliveryLogError
    ? e
    : new DeliveryLogError({ reason: "io", message: `${what} (${String(e)})`, path: o.dir })

/** `DeliveryLog.open`, with test hooks (crash points inside compaction). */
export const openFileLog = (
  options: OpenOptions,
  hooks: CompactionHooks = {}
): Effect.Effect<DeliveryLog, DeliveryLogError, Scope.Scope> =>
  Effect.gen(function*() {
    const o = resolveOptions(options)
    if (o instanceof DeliveryLogError) return yield* Effect.fail(o)
    const now = yield* Clock.currentTimeMillis
    const wanted = Latch.makeUnsafe(false)
    const healer = yield* Effect.acquireRelease(
      Effect.try({
        try: () => LogCore.open(o, now, hooks),
        catch: asLogError(o, "Could not open the log")
      }).pipe(Effect.flatMap((opened) => makeHealer(o, hooks, opened, () => void wanted.openUnsafe()))),
      (h) => h.close
    )

    // Automatic compaction: one at a time; after a failure, wait (doubling, capped) before the next try,
    // whatever the writes ask for meanwhile, so a blocked compaction cannot storm the disk.
    yield* Effect.forkScoped(
      Effect.gen(function*() {
        let delay = 0
        for (;;) {
          yield* wanted.await
          wanted.closeUnsafe()
          const core = healer.core
          const failed = yield* Effect.tryPromise({ try: () => core.compact(), catch: (e) => e }).pipe(
            Effect.as(false),
            Effect.catch((e) =>
              e instanceof DeliveryLogError && (e.reason === "closed" || healer.failing)
                ? Effect.succeed(false)
                : Effect.as(
                  Effect.logWarning(
                    `delivery log: automatic compaction failed: ${(e as Error).message}; next try in ${
                      Math.max(delay * 2, COMPACTION_RETRY_MS.first)
                    } ms at the earliest`
                  ),
                  true
                )
            )
          )
          delay = failed ? Math.min(Math.max(delay * 2, COMPACTION_RETRY_MS.first), COMPACTION_RETRY_MS.max) : 0
          if (delay > 0) yield* Effect.sleep(delay)
        }
      })
    )

    const call = <A>(f: (core: LogCore, done: Done<A>) => void): Effect.Effect<A, DeliveryLogError> =>
      Effect.callback<A, DeliveryLogError>((resume) => {
        const refused = healer.refusal
        if (refused !== undefined) return resume(Effect.fail(refused))
        f(healer.core, (err, value) => {
          if (err === undefined) {
            healer.succeeded()
            return resume(Effect.succeed(value as A))
          }
          resume(err.reason === "io" ? Effect.andThen(healer.failed(err), Effect.fail(err)) : Effect.fail(err))
        })
      })

    /** Now, by the clock of the fiber running (a callback's register runs inside its fiber). */
    const fiberNow = (): number => {
      const fiber = Fiber.getCurrent()
      return fiber === undefined ? Date.now() : fiber.getRef(Clock.Clock).currentTimeMillisUnsafe()
    }

    // One completion for every append: the fiber's resume travels with the call, no closure per append.
    type Resume = (effect: Effect.Effect<DeliveryEntry, DeliveryLogError>) => void
    const appended: AppendDone<Resume> = (err, entry, resume) => {
      if (err === undefined) {
        healer.succeeded()
        return resume(Effect.succeed(entry!))
      }
      resume(err.reason === "io" ? Effect.andThen(healer.failed(err), Effect.fail(err)) : Effect.fail(err))
    }

    const log: DeliveryLog = {
      // One Effect per append: the clock is the calling fiber's (TestClock in tests), read while it runs the callback.
      append: (message) =>
        Effect.callback<DeliveryEntry, DeliveryLogError>((resume) => {
          const refused = healer.refusal
          if (refused !== undefined) return resume(Effect.fail(refused))
          healer.core.append(message, fiberNow(), appended, resume)
        }),
      appendAndMark: (message) =>
        Effect.callback<readonly [DeliveryEntry, boolean], DeliveryLogError>((resume) => {
          const refused = healer.refusal
          if (refused !== undefined) return resume(Effect.fail(refused))
          healer.core.appendAndMark(message, fiberNow(), (err, entry, marked) => {
            if (err === undefined) {
              healer.succeeded()
              return resume(Effect.succeed([entry!, marked] as const))
            }
            resume(err.reason === "io" ? Effect.andThen(healer.failed(err), Effect.fail(err)) : Effect.fail(err))
          })
        }),
      attempt: (id, failure) => call((core, done) => core.attempt(id, failure, done)),
      ack: (id) =>
        Effect.clockWith((clock) => call<void>((core, done) => core.ack(id, clock.currentTimeMillisUnsafe(), done))),
      deadLetter: (id, reason) => call<void>((core, done) => core.deadLetter(id, reason, done)),
      requeue: (id) => call<void>((core, done) => core.requeue(id, done)),
      markStarted: (id) => call<void>((core, done) => core.markStarted(id, done)),
      ackAndMark: (id, next) =>
        Effect.clockWith((clock) =>
          Effect.callback<boolean, DeliveryLogError>((resume) => {
            const refused = healer.refusal
            if (refused !== undefined) return resume(Effect.fail(refused))
            healer.core.ackAndMark(id, next, clock.currentTimeMillisUnsafe(), (ackError, markError) => {
              if (ackError !== undefined) {
                return resume(
                  ackError.reason === "io"
                    ? Effect.andThen(healer.failed(ackError), Effect.fail(ackError))
                    : Effect.fail(ackError)
                )
              }
              if (markError?.reason === "io") return resume(Effect.as(healer.failed(markError), false))
              healer.succeeded()
              resume(Effect.succeed(markError === undefined))
            })
          })
        ),
      get: (id) => Effect.sync(() => Option.fromUndefinedOr(healer.core.get(id))),
      pending: Effect.sync(() => healer.core.list("pending")),
      dead: Effect.sync(() => healer.core.list("dead")),
      stats: Effect.sync(() => healer.core.stats()),
      health: healer.health,
      flush: call<void>((core, done) => core.flush(done)),
      compact: Effect.suspend(() => {
        const refused = healer.refusal
        if (refused !== undefined) return Effect.fail(refused)
        const core = healer.core
        return Effect.tryPromise({ try: () => core.compact(), catch: asLogError(o, "Compaction failed") })
      })
    }
    return log
  })
