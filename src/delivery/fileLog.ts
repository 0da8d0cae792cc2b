/**
 * The segmented file log as a `DeliveryLog`: Effects over `LogCore`, a Scope that flushes and
 * releases the lock, and a background fiber for automatic compaction.
 */
import { Clock, Effect, Latch, Option, type Scope } from "effect"
import type { CompactionHooks } from "./compaction.js"
import { DeliveryLogError } from "./errors.js"
import { type Done, LogCore } from "./logCore.js"
import type { DeliveryEntry, DeliveryLog, DeliveryLogHealth } from "./types.js"
import { type OpenOptions, resolveOptions } from "./validate.js"


/** `DeliveryLog.open`, with test hooks (crash points inside compaction). */
export const openFileLog = (
  options: OpenOptions,
  hooks: CompactionHooks = {}
): Effect.Effect<DeliveryLog, DeliveryLogError, Scope.Scope> =>
  Effect.gen(function* () {
    const o = resolveOptions(options)
    if (o instanceof DeliveryLogError) return yield* Effect.fail(o)
    const now = yield* Clock.currentTimeMillis
    const { core, notes } = yield* Effect.acquireRelease(
      Effect.try({
        try: () => LogCore.open(o, now, hooks),
        catch: (e) =>
          e instanceof DeliveryLogError
            ? e
            : new DeliveryLogError({ reason: "io", message: `Could not open the log (${String(e)})`, path: o.dir })
      }),
      ({ core }) => Effect.promise(() => core.close())
    )
    if (notes.truncated !== undefined) {
      yield* Effect.logWarning(
        `delivery log: cut a torn tail (${notes.truncated.why}) of ${notes.truncated.path} at offset ${notes.truncated.offset}; records after it were never reported durable`
      )
    }
    if (notes.tookOverLockFrom !== undefined) {
      yield* Effect.logWarning(`delivery log: took over the lock of ${o.dir} left by process ${notes.tookOverLockFrom}, which is gone`)
    }

    // The first write/sync failure is logged once (the calls it failed carry it too).
    let health: DeliveryLogHealth = { status: "ok" }
    const call = <A>(f: (done: Done<A>) => void): Effect.Effect<A, DeliveryLogError> =>
      Effect.callback<A, DeliveryLogError>((resume) => {
        f((err, value) => {
          if (err === undefined) return resume(Effect.succeed(value as A))
          if (err.reason !== "io" || health.status === "failing") return resume(Effect.fail(err))
          health = { status: "failing", since: Date.now(), error: err }
          resume(Effect.andThen(Effect.logWarning(`delivery log: ${err.message}`), Effect.fail(err)))
        })
      })

    const wanted = Latch.makeUnsafe(false)
    core.onCompactionWanted = () => void wanted.openUnsafe()
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.gen(function* () {
          yield* wanted.await
          wanted.closeUnsafe()
          yield* Effect.tryPromise({ try: () => core.compact(), catch: (e) => e }).pipe(
            Effect.catch((e) =>
              e instanceof DeliveryLogError && e.reason === "closed"
                ? Effect.void
                : Effect.logWarning(`delivery log: automatic compaction failed: ${(e as Error).message}`)
            )
          )
        })
      )
    )

    const log: DeliveryLog = {
      // The clock is read inside the call (one Effect less per append than flatMap over currentTimeMillis).
      append: (message) =>
        Effect.clockWith((clock) => call<DeliveryEntry>((done) => core.append(message, clock.currentTimeMillisUnsafe(), done))),
      attempt: (id, failure) => call((done) => core.attempt(id, failure, done)),
      ack: (id) => Effect.clockWith((clock) => call<void>((done) => core.ack(id, clock.currentTimeMillisUnsafe(), done))),
      deadLetter: (id, reason) => call<void>((done) => core.deadLetter(id, reason, done)),
      requeue: (id) => call<void>((done) => core.requeue(id, done)),
      get: (id) => Effect.sync(() => Option.fromUndefinedOr(core.get(id))),
      pending: Effect.sync(() => core.list("pending")),
      dead: Effect.sync(() => core.list("dead")),
      stats: Effect.sync(() => core.stats()),
      health: Effect.sync(() => health),
      flush: call<void>((done) => core.flush(done)),
      compact: Effect.tryPromise({
        try: () => core.compact(),
        catch: (e) =>
          e instanceof DeliveryLogError ? e : new DeliveryLogError({ reason: "io", message: `Compaction failed (${String(e)})`, path: o.dir })
      })
    }
    return log
  })
