/**
 * Failed user turns and their retries. A turn that fails keeps its messages accepted; the agent
 * tries the session again by itself after 1 s, 5 s, 30 s, then every 60 s (on the Effect `Clock`,
 * so `TestClock` drives it). A failure that trying again cannot fix by itself (a model error with
 * `retryable: false`, a corrupt transcript) waits for a new message of the session or `retry`.
 */
import { Effect, Fiber } from "effect"
import type { Scope } from "effect"

/** The delays between automatic retries of a failing session; the last one repeats. */
export const RETRY_DELAYS_MS: ReadonlyArray<number> = [1_000, 5_000, 30_000, 60_000]

/** The last failure of a session's turns. */
export interface TurnFailure {
  /** One line: what failed. */
  readonly error: string
  readonly retryable: boolean
  /** Failed turns in a row. */
  readonly attempts: number
  /** Epoch ms of the first failure in a row. */
  readonly since: number
  /** Epoch ms of the next automatic retry; absent: it waits for a new message of the session, or `retry`. */
  readonly retryAt?: number
}

/** A session with messages accepted and not answered. */
export interface UnansweredSession {
  readonly session: string
  /** Messages accepted and not answered. */
  readonly messages: number
  /** Present while the session's turns fail. */
  readonly failure?: TurnFailure
}

interface Failing {
  failure: TurnFailure
  /** The failure came from the disk or the delivery log (retried at once when the log is healthy again). */
  readonly io: boolean
  timer?: Fiber.Fiber<unknown, unknown>
}

/** The failure bookkeeping of one agent. `kick(session)` dispatches a fresh turn of the session. */
export const makeRetries = (deps: {
  readonly scope: Scope.Scope
  readonly kick: (session: string) => Effect.Effect<void>
}) => {
  const failing = new Map<string, Failing>()
  let closed = false

  const stopTimer = (f: Failing | undefined) =>
    f?.timer === undefined ? Effect.void : Effect.suspend(() => {
      const timer = f.timer!
      delete f.timer
      return Fiber.interrupt(timer)
    })

  /** Records a failed turn; schedules the next retry when `retryable`. Returns the delay, if any. */
  const failed = (session: string, error: string, retryable: boolean, io: boolean): Effect.Effect<number | undefined> =>
    Effect.gen(function*() {
      const before = failing.get(session)
      // A newer failure (a turn a new message started) replaces the timer of the older one.
      yield* stopTimer(before)
      const now = Date.now()
      const attempts = (before?.failure.attempts ?? 0) + 1
      const delay = retryable && !closed ? RETRY_DELAYS_MS[Math.min(attempts, RETRY_DELAYS_MS.length) - 1]! : undefined
      const entry: Failing = {
        failure: {
          error,
          retryable,
          attempts,
          since: before?.failure.since ?? now,
          ...(delay === undefined ? {} : { retryAt: now + delay })
        },
        io
      }
      failing.set(session, entry)
      if (delay !== undefined) {
        entry.timer = yield* Effect.forkIn(
          Effect.andThen(
            Effect.sleep(delay),
            Effect.suspend(() => {
              if (failing.get(session) === entry) delete entry.timer
              return deps.kick(session)
            })
          ),
          deps.scope
        )
      }
      return delay
    })

  /** A turn of the session answered its messages: it is not failing any more. */
  const succeeded = (session: string): Effect.Effect<void> =>
    Effect.suspend(() => {
      const f = failing.get(session)
      if (f === undefined) return Effect.void
      failing.delete(session)
      return stopTimer(f)
    })

  /**
   * Retries now: every failing session (or only `session`, failing or not), skipping its backoff.
   * `only` narrows the failing ones (e.g. those that failed on the disk). Returns how many got a turn.
   */
  const retry = (session?: string, only?: (io: boolean) => boolean): Effect.Effect<ReadonlyArray<string>> =>
    Effect.gen(function*() {
      const sessions = session !== undefined
        ? [session]
        : [...failing].filter(([, f]) => only === undefined || only(f.io)).map(([s]) => s)
      for (const s of sessions) {
        const f = failing.get(s)
        yield* stopTimer(f)
        if (f !== undefined) {
          const { retryAt: _, ...rest } = f.failure
          f.failure = rest
        }
      }
      return sessions
    })

  return {
    failed,
    succeeded,
    retry,
    /** Whether some session failed on the disk or the log (worth watching the log's health). */
    anyIo: (): boolean => [...failing.values()].some((f) => f.io),
    failureOf: (session: string): TurnFailure | undefined => failing.get(session)?.failure,
    /** Stops every timer (a shutdown began). */
    close: Effect.suspend(() => {
      closed = true
      return Effect.forEach([...failing.values()], stopTimer, { discard: true })
    })
  }
}
