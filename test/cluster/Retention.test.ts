/** Retention: what is past `retainMs` leaves the tables; unprocessed messages and recent history stay. */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { afterAll, beforeAll } from "vitest"
import * as Postgres from "../../src/cluster/Postgres.js"
import * as Retention from "../../src/cluster/Retention.js"
import * as Runner from "../../src/cluster/Runner.js"
import { freshDatabase, postgresAvailable } from "./pg.js"
import { freePort } from "./support.js"

const up = await postgresAvailable("test/cluster/Retention.test.ts")

describe.skipIf(!up)("Retention (Postgres)", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  let port = 0
  let clusterPort = 0
  beforeAll(async () => {
    db = await freshDatabase("retention")
    port = await freePort()
    clusterPort = await freePort()
  }, 30_000)
  afterAll(async () => {
    await db?.drop()
  })

  it.live(
    "prune removes turn records, processed cluster messages and their replies past retainMs, and transcript rows beyond historyLimit",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const runner = yield* Runner.start({
          postgres: db!.url,
          port,
          clusterPort,
          latencyMs: 0,
          shardsPerGroup: 8,
          name: "retention"
        })
        for (const text of ["one", "two", "three"]) {
          const f = yield* runner.queue.dispatch("main", "alice", { type: "message", session: "alice", text })
          yield* f.await
        }
        const count = (table: string, where = "true") =>
          Effect.map(
            Postgres.withClient(
              db!.url,
              (sql) => sql.unsafe<{ n: number }>(`SELECT count(*)::float8 AS n FROM ${table} WHERE ${where}`)
            ),
            (rows) => Number(rows[0].n)
          )
        assert.strictEqual(yield* count("switchyard_turns"), 3)
        assert.strictEqual(yield* count("switchyard_transcripts"), 6)
        assert.isAtLeast(yield* count("cluster_messages", "processed"), 3)
        yield* Retention.prune({ outbox: runner.outbox, retainMs: 0, historyLimit: 1 }).pipe(
          Effect.provide(Postgres.layer(db!.url, { maxConnections: 1 }))
        )
        assert.strictEqual(yield* count("switchyard_turns"), 0)
        assert.strictEqual(yield* count("switchyard_transcripts"), 2)
        assert.strictEqual(yield* count("cluster_messages", "processed AND tag = 'Run'"), 0)
        assert.strictEqual(yield* count("cluster_replies"), 0)
        // the history the next turn sees is the newest turn
        const rows = yield* Postgres.withClient(
          db!.url,
          (sql) => sql.unsafe<{ content: string }>(`SELECT content FROM switchyard_transcripts ORDER BY id`)
        )
        assert.deepStrictEqual(rows.map((r) => r.content), ["three", "You said: three"])
      })),
    60_000
  )
})
