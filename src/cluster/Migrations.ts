/**
 * The cluster's whole Postgres schema, created once, under one lock.
 *
 * `migrate` runs in one transaction that first takes the advisory lock `switchyard-schema`; runners
 * that start at the same moment on an empty database queue on that lock, the first creates every
 * table, the others find the work recorded and do nothing. It runs, in order, effect/cluster's own
 * migrations (`cluster_messages`, `cluster_replies`, `cluster_runners`, `cluster_locks`, histories
 * `cluster_migrations` and `cluster_runner_migrations`) and switchyard's (`<prefix>_outbox`,
 * `_generations`, `_members`, `_coalesce`, `_transcripts`, `_turns`, `_cron_firings`, `_shard_epochs`, `_inbox`, history
 * `<prefix>_migrations`), all through Effect's SQL `Migrator`. The SQL texts are in `MigrationsSql.ts`:
 * a new table or column is a new numbered entry there; an existing entry never changes.
 *
 * Nothing else in `src/cluster` creates a table: every other part needs the schema and says so.
 */
import { Effect, Record } from "effect"
import { SqlMessageStorage, SqlRunnerStorage } from "effect/cluster"
import { SqlClient } from "effect/sql"
import * as Migrator from "effect/sql/Migrator"
import type { SqlError } from "effect/sql/SqlError"
import { outboxSql, switchyardMigrationsSql } from "./MigrationsSql.js"

/** The advisory lock every schema change of a switchyard cluster holds (its `hashtext` key). */
export const SCHEMA_LOCK = "switchyard-schema"

/**
 * Runs `self` in a transaction that holds {@link SCHEMA_LOCK} (released at commit or rollback), so no
 * two processes change the schema at once.
 */
export const withSchemaLock = <A, E, R>(
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, E | SqlError, R | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql.withTransaction(
      Effect.andThen(sql`SELECT pg_advisory_xact_lock(hashtext(${SCHEMA_LOCK}))`, self)
    )
  })

/** Runs `statements` one after another on the client in context. */
const runAll = (statements: ReadonlyArray<string>): Effect.Effect<void, SqlError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    for (const statement of statements) yield* sql.unsafe(statement)
  })

/** The outbox table of `PgDeliveryLog` and its indexes (idempotent; run it under {@link withSchemaLock}). */
export const createOutbox = (table: string): Effect.Effect<void, SqlError, SqlClient.SqlClient> =>
  runAll(outboxSql(table))

/**
 * switchyard's migrations for the tables of `prefix`, as a `Migrator` loader: each entry of
 * `switchyardMigrationsSql` (MigrationsSql.ts) runs its statements in order.
 */
export const switchyardMigrations = (prefix: string): Migrator.Loader =>
  Migrator.fromRecord(Record.map(switchyardMigrationsSql(prefix), runAll))

/** Options of {@link migrate}. */
export interface MigrateOptions {
  /** switchyard's table prefix; default `switchyard`. */
  readonly prefix?: string
  /** effect/cluster's table prefix; default `cluster` (effect/cluster's own default). */
  readonly clusterPrefix?: string
  /** Also create effect/cluster's tables; default true. */
  readonly cluster?: boolean
}

/**
 * Creates what is missing of the schema, in one transaction under {@link SCHEMA_LOCK}; returns the
 * migrations it ran (`[]` when the schema was complete). Safe from many processes at once.
 */
export const migrate = (
  options: MigrateOptions = {}
): Effect.Effect<ReadonlyArray<string>, Migrator.MigrationError | SqlError, SqlClient.SqlClient> =>
  withSchemaLock(Effect.gen(function*() {
    const prefix = options.prefix ?? "switchyard"
    const clusterPrefix = options.clusterPrefix ?? "cluster"
    const run = Migrator.make({})
    const ran: Array<string> = []
    const record = (owner: string) => (done: ReadonlyArray<readonly [number, string]>) => {
      for (const [id, name] of done) ran.push(`${owner}:${String(id).padStart(4, "0")}_${name}`)
    }
    if (options.cluster !== false) {
      // The history tables are the ones effect/cluster's own layers use, so they find the work done.
      record(`${clusterPrefix}_messages`)(
        yield* run({
          loader: SqlMessageStorage.migrations({ prefix: clusterPrefix }),
          table: `${clusterPrefix}_migrations`
        })
      )
      record(`${clusterPrefix}_runners`)(
        yield* run({
          loader: SqlRunnerStorage.migrations({ prefix: clusterPrefix }),
          table: `${clusterPrefix}_runner_migrations`
        })
      )
    }
    record(prefix)(yield* run({ loader: switchyardMigrations(prefix), table: `${prefix}_migrations` }))
    return ran
  }))
