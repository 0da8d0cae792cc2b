/**
 * The schema on an empty database: many processes' worth of `migrate` at the same moment, each on a
 * connection of its own, all succeed; exactly one of them creates the tables; a later run finds
 * nothing to do. (The CREATE TABLE IF NOT EXISTS statements they replace raced on `pg_type`.)
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { afterEach, describe, expect, it } from "vitest"
import * as Migrations from "../../src/cluster/Migrations.js"
import * as Postgres from "../../src/cluster/Postgres.js"
import { freshDatabase, postgresAvailable } from "./pg.js"

const up = await postgresAvailable("test/cluster/Migrations.test.ts")

describe.skipIf(!up)("Migrations (Postgres)", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  afterEach(async () => {
    await db?.drop()
    db = undefined
  })

  it(
    "eight migrate calls at the same moment on a fresh database, one connection each: all succeed, one runs the migrations, a ninth finds nothing to do",
    async () => {
      db = await freshDatabase("migrate")
      const url = db.url
      const runs = await Promise.all(
        Array.from(
          { length: 8 },
          () =>
            Effect.runPromise(
              Postgres.withClient(url, (sql) =>
                Migrations.migrate().pipe(Effect.provideService(SqlClient.SqlClient, sql)))
            )
        )
      )
      const ran = runs.filter((r) => r.length > 0)
      expect(ran).toEqual([[
        "cluster_messages:0001_create_tables",
        "cluster_messages:0002_entity_type_size",
        "cluster_messages:0003_pg_messages_rowid_index",
        "cluster_runners:0001_create_tables",
        "switchyard:0001_tables",
        "switchyard:0002_shard_epochs",
        "switchyard:0003_inbox",
        "switchyard:0004_turn_epochs",
        "switchyard:0005_message_functions",
        "switchyard:0006_cron_run",
        "switchyard:0007_volatile_ingress",
        "switchyard:0008_turn_start_async"
      ]])
      const again = await Effect.runPromise(
        Postgres.withClient(url, (sql) => Migrations.migrate().pipe(Effect.provideService(SqlClient.SqlClient, sql)))
      )
      expect(again).toEqual([])
      const tables = await Effect.runPromise(
        Postgres.withClient(
          url,
          (sql) =>
            sql.unsafe<{ t: string }>(`SELECT tablename AS t FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
        )
      )
      expect(tables.map((r) => r.t)).toEqual([
        "cluster_locks",
        "cluster_messages",
        "cluster_migrations",
        "cluster_replies",
        "cluster_runner_migrations",
        "cluster_runners",
        "switchyard_coalesce",
        "switchyard_cron_firings",
        "switchyard_generations",
        "switchyard_inbox",
        "switchyard_members",
        "switchyard_migrations",
        "switchyard_outbox",
        "switchyard_shard_epochs",
        "switchyard_transcripts",
        "switchyard_turns"
      ])
    },
    60_000
  )

  it(
    "a database set up before the migrator (tables, no history) migrates without error and keeps its rows",
    async () => {
      db = await freshDatabase("legacy")
      const url = db.url
      await Effect.runPromise(Postgres.withClient(url, (sql) =>
        Effect.gen(function*() {
          yield* sql.unsafe(`CREATE TABLE switchyard_generations (lane text PRIMARY KEY, generation bigint NOT NULL)`)
          yield* sql.unsafe(`INSERT INTO switchyard_generations VALUES ('main', 7)`)
        })))
      const ran = await Effect.runPromise(
        Postgres.withClient(
          url,
          (sql) => Migrations.migrate({ cluster: false }).pipe(Effect.provideService(SqlClient.SqlClient, sql))
        )
      )
      expect(ran).toEqual([
        "switchyard:0001_tables",
        "switchyard:0002_shard_epochs",
        "switchyard:0003_inbox",
        "switchyard:0004_turn_epochs",
        "switchyard:0005_message_functions",
        "switchyard:0006_cron_run",
        "switchyard:0007_volatile_ingress",
        "switchyard:0008_turn_start_async"
      ])
      const rows = await Effect.runPromise(
        Postgres.withClient(
          url,
          (sql) =>
            sql.unsafe<{ generation: number }>(`SELECT generation::float8 AS generation FROM switchyard_generations`)
        )
      )
      expect(rows.map((r) => Number(r.generation))).toEqual([7])
    },
    60_000
  )
})
