/**
 * The schema on an empty database: many processes' worth of `migrate` at the same moment, each on a
 * connection of its own, all succeed; exactly one of them creates the tables; a later run finds
 * nothing to do. (The CREATE TABLE IF NOT EXISTS statements they replace raced on `pg_type`.) And
 * the texts of the migrations already applied somewhere stay what they were, byte for byte.
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import { createHash } from "node:crypto"
import { afterEach, describe, expect, it } from "vitest"
import * as Migrations from "../../src/cluster/Migrations.js"
import * as Postgres from "../../src/cluster/Postgres.js"
import { freshDatabase, postgresAvailable } from "./pg.js"

const up = await postgresAvailable("test/cluster/Migrations.test.ts")

describe("switchyard's migrations", () => {
  it("run, with prefix switchyard, exactly the statements each ran when it was first applied (sha256 of the texts, no Postgres needed)", async () => {
    // An applied migration is recorded by id only: a changed byte would reach new databases and never
    // old ones. A schema change is a new entry; add its line here when it lands.
    const pinned: Record<string, string> = {
      "0001_tables": "dcdf9471fb32c158a2e6a80d76da451dbc484f49a46394ec455c7b244f0228df 12",
      "0002_shard_epochs": "51b3b21644abeb6f60bb9197992a1385d795d4a7ad444be813ebcc87cfd5e4ab 2",
      "0003_inbox": "783ed5fac59fab6274ce98c6a79bf70912bec3d080f21fc2943912a797b4a3a1 5",
      "0004_turn_epochs": "1857d631d722062902691859716ef0b616ee2197f3cb64c0158d23608c1d0aee 1",
      "0005_message_functions": "c51587aef5ef770b775db301c48a9a62ef0d76c1f83857ea75b1f67e0c2d3e3a 2",
      "0006_cron_run": "152cd2cd585e6c68af9730fc0f58f4c5de437d33f998abfc5513518a0bf7775a 1",
      "0007_volatile_ingress": "2c9d39410ace8794d903d92ab9ab62c213610cc82835214a4ca401a3832b49d5 4",
      "0008_turn_start_async": "f6f2f6f846003cc9fe2afc58efcef709aa429e0a063fdcb9b7a71eae872a1a8f 1",
      "0009_slot_start": "9674c60a8b3ded124e665ac5b4bb068191cc895954b9e5dd434ef861241e873e 1",
      "0010_ingress_owners": "d2d217243ed0416bebb67b009cc044b595f309eddaf21dc68ef2890b13cdf4d0 1"
    }
    const ran: Record<string, string> = {}
    for (const [id, name, load] of await Effect.runPromise(Migrations.switchyardMigrations("switchyard"))) {
      const statements: Array<string> = []
      const recorder = { unsafe: (text: string) => Effect.sync(() => void statements.push(text)) }
      await Effect.runPromise(
        Effect.provideService(Effect.flatten(load), SqlClient.SqlClient, recorder as unknown as SqlClient.SqlClient)
      )
      const digest = createHash("sha256").update(JSON.stringify(statements)).digest("hex")
      ran[`${String(id).padStart(4, "0")}_${name}`] = `${digest} ${statements.length}`
    }
    expect(Object.fromEntries(Object.entries(ran).filter(([key]) => key in pinned))).toEqual(pinned)
  })
})

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
        "switchyard:0008_turn_start_async",
        "switchyard:0009_slot_start",
        "switchyard:0010_ingress_owners"
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
        "switchyard_ingress_owners",
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
        "switchyard:0008_turn_start_async",
        "switchyard:0009_slot_start",
        "switchyard:0010_ingress_owners"
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
