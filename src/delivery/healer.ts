/**
 * Self-healing of the file log: after a failed write (the writer never retries a sync) the log
 * re-opens itself through recovery, as `open` does, keeping its lock. The first re-open runs at once,
 * so reads show what a re-open shows (the failed batch is cut: it was never reported durable); calls
 * keep failing fast with the last `io` error until the backoff has passed (1 s, doubling to 30 s,
 * back to 1 s after a write succeeds), so a disk that is still full is not hammered. A log whose folder
 * or lock went away (lockWatch.ts) heals the same way, taking the lock anew, once its folder is there.
 */
import { Clock, Deferred, Effect, Fiber } from "effect"
import * as fs from "node:fs"
import type { CompactionHooks } from "./compaction.js"
import { DeliveryLogError } from "./errors.js"
import { LogCore, type OpenNotes } from "./logCore.js"
import type { DeliveryLogHealth } from "./types.js"
import type { ResolvedOptions } from "./validate.js"

/** Backoff between re-opens: 1 s doubling, at most 30 s (delivery.md, "Health"). */
export const REOPEN_MS = { first: 1_000, max: 30_000 } as const

/** The current core of a file log and its health. */
export interface Healer {
  /** The core calls go to (a new one after each re-open). */
  readonly core: LogCore
  /** While failing: the error every mutating call fails with at once. */
  readonly refusal: DeliveryLogError | undefined
  readonly failing: boolean
  readonly health: Effect.Effect<DeliveryLogHealth>
  /** A mutating call succeeded: the next failure starts its backoff at 1 s again. */
  readonly succeeded: () => void
  /**
   * A call (or, with `from`, that core's writer in the background) failed with `io`: turn failing (once
   * per episode, with a warning) and start healing; a failure of the core the episode re-opened, during
   * its backoff, makes the backoff's end re-open it again.
   */
  readonly failed: (error: DeliveryLogError, from?: LogCore) => Effect.Effect<void>
  /** Stop healing and close the core (flush, release the lock). */
  readonly close: Effect.Effect<void>
}

const warnOpened = (dir: string, notes: OpenNotes): Effect.Effect<void> =>
  Effect.gen(function*() {
    if (notes.truncated !== undefined) {
      yield* Effect.logWarning(
        `delivery log: cut a torn tail (${notes.truncated.why}) of ${notes.truncated.path} at offset ${notes.truncated.offset}; records after it were never reported durable`
      )
    }
    if (notes.tookOverLockFrom !== undefined) {
      yield* Effect.logWarning(
        `delivery log: took over the lock of ${dir} left by process ${notes.tookOverLockFrom}, which is gone`
      )
    }
  })

/** Wrap a freshly opened core. `onCompactionWanted` is wired to every core it will hold. */
export const makeHealer = (
  o: ResolvedOptions,
  hooks: CompactionHooks,
  opened: { readonly core: LogCore; readonly notes: OpenNotes },
  onCompactionWanted: () => void
): Effect.Effect<Healer> =>
  Effect.gen(function*() {
    const context = yield* Effect.context<never>()
    const run = Effect.runForkWith(context)
    let core = opened.core
    let health: DeliveryLogHealth = { status: "ok" }
    let delay: number = REOPEN_MS.first
    let healing: Fiber.Fiber<void> | undefined
    let closed = false

    const wire = (c: LogCore): void => {
      c.onCompactionWanted = onCompactionWanted
      // The writer failed without a call to carry it (e.g. a roll during compaction).
      c.onFailed = (error) => void run(failed(error, c))
    }
    wire(core)
    yield* warnOpened(o.dir, opened.notes)

    const reopen: Effect.Effect<boolean> = Effect.gen(function*() {
      const old = core
      yield* Effect.promise(() => old.close(true))
      const now = yield* Clock.currentTimeMillis
      // The directory or its lock went away under the log (lockWatch.ts): the lock is taken anew, and a
      // deleted folder is not made again here (an empty log would stand in for the lost one unnoticed):
      // the log re-opens once somebody makes it again, or the process restarts.
      const lost = old.lockLost
      try {
        if (lost !== undefined && !fs.existsSync(o.dir)) throw lost
        const next = LogCore.open(o, now, hooks, lost === undefined ? old.lock : undefined)
        wire(next.core)
        core = next.core
        yield* warnOpened(o.dir, next.notes)
        return true
      } catch (e) {
        const error = e instanceof DeliveryLogError
          ? e
          : new DeliveryLogError({ reason: "io", message: `Could not re-open the log (${String(e)})`, path: o.dir })
        if (health.status === "failing") health = { ...health, error }
        return false
      }
    })

    /** Completes once the first re-open of the current episode ran (failed calls wait for it, see `failed`). */
    let firstReopen = Deferred.makeUnsafe<void>()
    /** The core the episode re-opened failed too, during the backoff: it is re-opened again before writes resume. */
    let reopenedFailed = false
    const heal: Effect.Effect<void> = Effect.gen(function*() {
      reopenedFailed = false
      let reopened = yield* Effect.ensuring(reopen, Deferred.succeed(firstReopen, undefined))
      for (;;) {
        const wait = delay
        delay = Math.min(delay * 2, REOPEN_MS.max)
        yield* Effect.sleep(wait)
        if (closed) return
        if (reopenedFailed) {
          reopenedFailed = false
          reopened = false
        }
        if (!reopened) reopened = yield* reopen
        if (reopened) {
          health = { status: "ok" }
          healing = undefined
          yield* Effect.logInfo(`delivery log: re-opened ${o.dir} after a failed write; it accepts writes again`)
          return
        }
        yield* Effect.logWarning(
          `delivery log: re-opening ${o.dir} failed (${
            health.status === "failing" ? health.error.message : "?"
          }); next try in ${delay} ms`
        )
      }
    })

    // The call that failed returns only after the first re-open, so what it reads next matches the disk.
    const failed = (error: DeliveryLogError, from?: LogCore): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (closed) return Effect.void
        if (health.status === "failing") {
          // The core this episode re-opened failed in the background while writes wait out the backoff
          // (a roll, a compaction): the backoff's end re-opens it again instead of resuming on it.
          if (from !== undefined && from === core && Deferred.isDoneUnsafe(firstReopen)) {
            reopenedFailed = true
            health = { ...health, error }
          }
          return Deferred.await(firstReopen)
        }
        return Effect.flatMap(Clock.currentTimeMillis, (since) => {
          if (health.status === "failing") return Deferred.await(firstReopen)
          health = { status: "failing", since, error }
          firstReopen = Deferred.makeUnsafe<void>()
          const wait = firstReopen
          healing = run(heal)
          return Effect.andThen(
            Effect.logWarning(
              `delivery log: ${error.message} (writes are refused for ${delay} ms while it re-opens through recovery; the wait doubles up to ${REOPEN_MS.max} ms)`
            ),
            Deferred.await(wait)
          )
        })
      })

    return {
      get core() {
        return core
      },
      get refusal() {
        return health.status === "failing" ? health.error : undefined
      },
      get failing() {
        return health.status === "failing"
      },
      health: Effect.sync(() => health),
      succeeded: () => {
        if (delay !== REOPEN_MS.first && health.status === "ok") delay = REOPEN_MS.first
      },
      failed,
      close: Effect.gen(function*() {
        closed = true
        if (healing !== undefined) yield* Fiber.interrupt(healing)
        const warning = yield* Effect.promise(() => core.close())
        if (warning !== undefined) yield* Effect.logWarning(warning)
      })
    } satisfies Healer
  })
