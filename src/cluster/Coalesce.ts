/**
 * Coalescing across processes. A key's runs reach its runner one at a time, so "join the run of this
 * key that waits" must be decided where the waiting run is: in Postgres. Each (lane, key) has a slot
 * row `(slot, started)`. A coalescing dispatch locks the row; if the slot's run has not started it
 * joins it (same run id, so the cluster dedupes the message), else it takes the next slot; the
 * message is sent while the lock is held. The runner marks the slot started (waiting for that lock)
 * before it runs it. So a coalescing dispatch never joins a run that has started, and a trigger
 * that arrives while a run runs is never lost: it owes exactly one follow-up run.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import type { SqlError } from "effect/sql/SqlError"

/** The coalescing slots of one cluster (table `<prefix>_coalesce`). */
export interface Coalesce {
  /**
   * Runs `send` with the run id to use, inside the slot's lock: `joined` when a run of the key waits
   * and has not started (`runId` is its id), else a new slot's id.
   */
  readonly withSlot: <A, E, R>(
    lane: string,
    key: string,
    send: (slot: { readonly runId: string; readonly slot: number; readonly joined: boolean }) => Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | SqlError, R>
  /** The runner is about to run `slot` of the key: later coalescing dispatches take the next slot. */
  readonly markStarted: (lane: string, key: string, slot: number) => Effect.Effect<void, SqlError>
}

/** The run id of a slot. */
export const runIdOf = (lane: string, key: string, slot: number): string => `coalesce:${lane}:${key}:${slot}`

/** The slots of `prefix` (the table comes from `Migrations.migrate`). */
export const make = (prefix = "switchyard"): Effect.Effect<Coalesce, never, PgClient.PgClient> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const table = `${prefix}_coalesce`
    return {
      withSlot: <A, E, R>(
        lane: string,
        key: string,
        send: (
          slot: { readonly runId: string; readonly slot: number; readonly joined: boolean }
        ) => Effect.Effect<A, E, R>
      ) =>
        // `send` runs outside the transaction (on the context from before it): only the row lock is held.
        Effect.flatMap(Effect.context<R>(), (outside) =>
          sql.withTransaction(Effect.gen(function*() {
            yield* sql.unsafe(
              `INSERT INTO ${table} (lane, key, slot, started) VALUES ($1, $2, 0, true) ON CONFLICT (lane, key) DO NOTHING`,
              [lane, key]
            )
            const rows = yield* sql.unsafe<{ readonly slot: number; readonly started: boolean }>(
              `SELECT slot::float8 AS slot, started FROM ${table} WHERE lane = $1 AND key = $2 FOR UPDATE`,
              [lane, key]
            )
            const current = Number(rows[0].slot)
            const joined = !rows[0].started
            const slot = joined ? current : current + 1
            if (!joined) {
              yield* sql.unsafe(`UPDATE ${table} SET slot = $3, started = false WHERE lane = $1 AND key = $2`, [
                lane,
                key,
                slot
              ])
            }
            return yield* Effect.provideContext(send({ runId: runIdOf(lane, key, slot), slot, joined }), outside)
          }))),
      markStarted: (lane, key, slot) =>
        Effect.asVoid(sql.unsafe(
          `UPDATE ${table} SET started = true WHERE lane = $1 AND key = $2 AND slot = $3`,
          [lane, key, slot]
        ))
    }
  })
