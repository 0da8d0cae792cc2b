/**
 * A runner ready to answer at once (docs/cluster.md "Start-up and readiness"): its Postgres connections opened
 * and warmed before it takes messages (src/cluster/Warmup.ts), nothing of the warm-up left in any table, the
 * warmed connections kept open; and the hop's connection to another runner opened when that runner appears
 * among the shards' owners, before any run is sent there (src/cluster/Hop.ts).
 */
import { PgClient } from "@effect/sql-pg"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import * as http from "node:http"
import type * as net from "node:net"
import * as Hop from "../../src/cluster/Hop.js"
import * as HopWire from "../../src/cluster/HopWire.js"
import * as Migrations from "../../src/cluster/Migrations.js"
import * as Postgres from "../../src/cluster/Postgres.js"
import * as Runner from "../../src/cluster/Runner.js"
import * as Warmup from "../../src/cluster/Warmup.js"
import { postgresAvailable, useFreshDatabase } from "./pg.js"
import { freePort } from "./support.js"

const up = await postgresAvailable("test/cluster/Warmup.test.ts")

describe.skipIf(!up)("a runner ready to answer at once (Postgres)", () => {
  const db = useFreshDatabase("warmup")

  const count = (table: string) =>
    Effect.map(
      Postgres.withClient(db.url, (sql) => sql.unsafe<{ n: number }>(`SELECT count(*)::float8 AS n FROM ${table}`)),
      (rows) => Number(rows[0].n)
    )

  it.live(
    "warm: N distinct connections each run every round in a transaction rolled back, and stay open",
    () =>
      Effect.scoped(Effect.gen(function*() {
        yield* Postgres.withClient(db.url, (sql) =>
          Effect.andThen(
            sql.unsafe(`CREATE TABLE warm_rows (pid integer, round integer)`),
            sql.unsafe(`CREATE SEQUENCE warm_seq`)
          ))
        const pool = yield* Layer.build(Postgres.layer(db.url, { maxConnections: 5, minConnections: 3 }))
        const rounds = new Map<number, Array<number>>()
        const warmed = yield* Warmup.warm({
          connections: 3,
          statements: (round) =>
            Effect.gen(function*() {
              const sql = yield* PgClient.PgClient
              const [row] = yield* sql.unsafe<{ pid: number }>(
                `INSERT INTO warm_rows (pid, round) SELECT pg_backend_pid(), $1 RETURNING pid`,
                [round]
              )
              // Not transactional: counts the statements that ran, whatever was rolled back.
              yield* sql.unsafe(`SELECT nextval('warm_seq')`)
              rounds.set(row.pid, [...(rounds.get(row.pid) ?? []), round])
            })
        }).pipe(Effect.provideContext(pool))
        assert.deepStrictEqual({ connections: warmed.connections, failures: warmed.failures }, {
          connections: 3,
          failures: 0
        })
        // Three different backends, six rounds each (past the five custom plans of each statement).
        assert.strictEqual(rounds.size, 3)
        for (const r of rounds.values()) assert.deepStrictEqual(r, [0, 1, 2, 3, 4, 5])
        assert.strictEqual(yield* count("warm_rows"), 0)
        const [seq] = yield* Postgres.withClient(
          db.url,
          (sql) => sql.unsafe<{ n: number }>(`SELECT last_value::float8 AS n FROM warm_seq`)
        )
        assert.strictEqual(Number(seq.n), 18)
        // The warmed backends are still there, open in the pool.
        const alive = yield* Postgres.withClient(db.url, (sql) =>
          sql.unsafe<{ pid: number }>(
            `SELECT pid FROM pg_stat_activity WHERE pid = ANY($1::integer[])`,
            [[...rounds.keys()]]
          ))
        assert.strictEqual(alive.length, 3)
      })),
    60_000
  )

  it.live(
    "a runner's start warms its connections on the message path's statements and writes nothing",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const port = yield* Effect.promise(freePort)
        const runner = yield* Runner.start({
          postgres: db.url,
          port,
          clusterPort: yield* Effect.promise(freePort),
          latencyMs: 0,
          shardsPerGroup: 8,
          name: "warmup",
          warmConnections: 3
        })
        assert.strictEqual(runner.warmed.connections, 3)
        assert.strictEqual(runner.warmed.failures, 0, runner.warmed.firstFailure)
        for (
          const table of ["switchyard_inbox", "switchyard_coalesce", "switchyard_outbox", "switchyard_transcripts"]
        ) {
          assert.strictEqual(yield* count(table), 0, table)
        }
        assert.strictEqual(yield* count("switchyard_turns"), 0)
        // It answers as before.
        const f = yield* runner.queue.dispatch("main", "alice", { type: "message", session: "alice", text: "hi" })
        yield* f.await
        assert.strictEqual(yield* count("switchyard_turns"), 1)
      })),
    60_000
  )

  it.live(
    "the hop opens its connection to another runner's ingress when that runner appears among the owners",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const pool = yield* Layer.build(Postgres.layer(db.url, { maxConnections: 2 }))
        yield* Effect.orDie(Migrations.migrate({})).pipe(Effect.provideContext(pool))
        // Another runner's ingress: takes the hop's upgrade and answers nothing.
        let upgraded = 0
        const server = http.createServer()
        server.on("upgrade", (_req: http.IncomingMessage, socket: net.Socket) => {
          upgraded++
          // The hop's side resets it when the test's scope closes: not an error of the test.
          socket.on("error", () => {})
          socket.write(
            `HTTP/1.1 101 Switching Protocols\r\nupgrade: ${HopWire.HOP_PROTOCOL}\r\nconnection: Upgrade\r\n\r\n`
          )
        })
        const port = yield* Effect.promise(freePort)
        yield* Effect.acquireRelease(
          Effect.callback<void>((resume) => void server.listen(port, "127.0.0.1", () => resume(Effect.void))),
          () => Effect.sync(() => server.close())
        )
        yield* Hop.make({ self: "me", refreshMs: 100 }).pipe(Effect.provideContext(pool))
        yield* Postgres.withClient(db.url, (sql) =>
          Effect.andThen(
            sql.unsafe(`INSERT INTO switchyard_ingress_owners (owner, url, registered_at) VALUES ('other', $1, 0)`, [
              `http://127.0.0.1:${port}`
            ]),
            sql.unsafe(
              `INSERT INTO switchyard_shard_epochs (shard, epoch, owner, claimed_at) VALUES ('hoptest:1', 1, 'other', 0)`
            )
          ))
        // No run was sent: the connection is opened by the owners' read alone.
        for (let i = 0; i < 50 && upgraded === 0; i++) yield* Effect.sleep("100 millis")
        assert.strictEqual(upgraded, 1)
      })),
    30_000
  )
})
