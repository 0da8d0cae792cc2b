/**
 * Keeps the cluster's tables from growing without end: every `everyMs`, rows older than `retainMs`
 * go: turn records, cron firings, acked outbox entries past their dedupe window (`compact`),
 * transcript rows beyond `historyLimit` turns per session, and effect/cluster's processed messages
 * and their replies. (effect/cluster keeps them for ever; they are what dedupes a re-sent run id, so
 * a run id re-sent after `retainMs` runs again.) Unprocessed messages are never touched.
 */
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Schedule } from "effect"
import type { Scope } from "effect"
import { MachineId, Snowflake } from "effect/cluster"
import type { PgDeliveryLog } from "./PgDeliveryLog.js"

/** Options of {@link start}. */
export interface RetentionOptions {
  readonly outbox: PgDeliveryLog
  /** Default 24 h. */
  readonly retainMs?: number
  /** Default 60 s. */
  readonly everyMs?: number
  /** Turns of transcript kept per session; default 20. */
  readonly historyLimit?: number
  /** switchyard's table prefix; default `switchyard`. */
  readonly prefix?: string
  /** effect/cluster's table prefix; default `cluster`. */
  readonly clusterPrefix?: string
}

/** One pass: deletes what is past retention. Safe to run from every runner at once. */
export const prune = (options: RetentionOptions): Effect.Effect<void, unknown, PgClient.PgClient> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const prefix = options.prefix ?? "switchyard"
    const cluster = options.clusterPrefix ?? "cluster"
    const cutoff = Date.now() - (options.retainMs ?? 24 * 60 * 60 * 1000)
    const keep = (options.historyLimit ?? 20) * 2
    yield* sql.unsafe(`DELETE FROM ${prefix}_turns WHERE ended_at < $1`, [cutoff])
    yield* sql.unsafe(`DELETE FROM ${prefix}_cron_firings WHERE due_at < $1`, [cutoff])
    yield* sql.unsafe(
      `DELETE FROM ${prefix}_transcripts WHERE id IN (
         SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY session ORDER BY id DESC) AS n FROM ${prefix}_transcripts) t
         WHERE n > $1)`,
      [keep]
    )
    yield* options.outbox.compact
    const cut = String(Snowflake.make({ timestamp: cutoff, machineId: MachineId.make(0), sequence: 0 }))
    yield* sql.unsafe(
      `DELETE FROM ${cluster}_replies WHERE request_id IN (SELECT request_id FROM ${cluster}_messages WHERE processed AND id < $1::bigint)`,
      [cut]
    )
    yield* sql.unsafe(`DELETE FROM ${cluster}_messages WHERE processed AND id < $1::bigint`, [cut])
  })

/** Runs {@link prune} every `everyMs` for the Scope's lifetime; a failed pass is logged and retried next time. */
export const start = (options: RetentionOptions): Effect.Effect<void, never, PgClient.PgClient | Scope.Scope> =>
  prune(options).pipe(
    Effect.catchCause((cause) => Effect.logWarning("Retention pass failed", cause)),
    Effect.delay(Duration.millis(options.everyMs ?? 60_000)),
    Effect.repeat(Schedule.forever),
    Effect.forkScoped,
    Effect.asVoid
  )
