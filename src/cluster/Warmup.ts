/**
 * A runner's Postgres connections opened and warmed before it takes messages (docs/cluster.md "Start-up
 * and readiness"). A Postgres backend's first call of a statement pays for what it has not cached yet: the
 * catalog entries of the tables it touches, a PL/pgSQL function's compilation, the client's named prepared
 * statement (Parse, Describe), and a freshly planned ("custom") plan at each of its first five executions,
 * after which the backend may keep a generic plan. The slot function on a fresh backend took ~16 ms for its
 * first call, ~1 ms for its next five and ~0.45 ms from then on (psql, 2026-12-03, load 4). The pool opens
 * its connections lazily, so a runner's first messages paid that on every connection they landed on.
 *
 * {@link warm} takes `connections` connections of the pool at once (so they are distinct ones: each waits
 * for the others before it runs anything), and on each, in one transaction that is rolled back, runs the
 * message path's statements `rounds` times with inputs of their own that match no row of a real session
 * (Runner.ts says which). Nothing of it is visible to anyone: the rows written are rolled back with the
 * transaction, and the backends keep only their caches. The pool keeps these connections open
 * (ClusterLayer.ts `minConnections`), so a runner idle for longer than the pool's idle timeout still answers
 * its next message on warm backends.
 */
import { PgClient } from "@effect/sql-pg"
import { Cause, Deferred, Effect, Exit } from "effect"

/** Options of {@link warm}. */
export interface WarmOptions {
  /** Connections to open and warm at once; 0 does nothing. */
  readonly connections: number
  /** How often each statement runs on each connection; default 6 (past the five custom plans). */
  readonly rounds?: number
  /** How long a connection waits for the others to be open before it warms anyway; default 2_000 ms. */
  readonly gatherMs?: number
  /** The statements of one round on one connection (inside its transaction). */
  readonly statements: (round: number, connection: number) => Effect.Effect<unknown, unknown, PgClient.PgClient>
}

/** What {@link warm} did. */
export interface Warmed {
  /** Connections warmed (their transactions ran the statements). */
  readonly connections: number
  /** Rounds that failed on some connection (the warm-up goes on: it only saves time). */
  readonly failures: number
  /** The first of those failures, for the log. */
  readonly firstFailure?: string
  readonly ms: number
}

/** Marks the warm-up's transaction to be rolled back (its writes were only for the backend's caches). */
class RollBack {
  readonly _tag = "RollBack"
}

/**
 * Opens `connections` connections of the pool and warms them (see the module's comment). A failure of a
 * statement is counted, not raised: the runner starts the same, only colder.
 */
export const warm = (options: WarmOptions): Effect.Effect<Warmed, never, PgClient.PgClient> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const started = Date.now()
    const n = Math.max(0, Math.floor(options.connections))
    if (n === 0) return { connections: 0, failures: 0, ms: 0 }
    const rounds = options.rounds ?? 6
    const all = Deferred.makeUnsafe<void>()
    let open = 0
    let failures = 0
    let firstFailure: string | undefined
    let warmed = 0
    const one = (connection: number) =>
      sql.withTransaction(Effect.gen(function*() {
        // Hold this connection until every other one is taken too, so that each is a different one.
        if (++open === n) Deferred.doneUnsafe(all, Exit.void)
        yield* Effect.timeoutOption(Deferred.await(all), options.gatherMs ?? 2_000)
        for (let round = 0; round < rounds; round++) {
          // A statement that fails aborts the transaction: the rest of this connection's rounds would fail too.
          const failed = yield* Effect.matchCause(options.statements(round, connection), {
            onFailure: (cause) => {
              firstFailure ??= Cause.pretty(cause)
              return true
            },
            onSuccess: () => false
          })
          if (failed) {
            failures++
            break
          }
        }
        warmed++
        return yield* Effect.fail(new RollBack())
      })).pipe(Effect.ignore)
    yield* Effect.forEach(Array.from({ length: n }, (_, i) => i), one, { concurrency: n, discard: true })
    return {
      connections: warmed,
      failures,
      ms: Date.now() - started,
      ...(firstFailure === undefined ? {} : { firstFailure })
    }
  })
