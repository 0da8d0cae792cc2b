/**
 * The Postgres delivery log: what is particular to it (claims, leases, many processes). The shared
 * contract of every DeliveryLog runs in PgDeliveryLog.contract.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Option, Scope } from "effect"
import { SqlClient } from "effect/sql"
import { afterAll, beforeAll } from "vitest"
import * as PgDeliveryLog from "../../src/cluster/PgDeliveryLog.js"
import * as Postgres from "../../src/cluster/Postgres.js"
import { freshDatabase, postgresAvailable } from "./pg.js"

const up = await postgresAvailable("test/cluster/PgDeliveryLog.test.ts")

describe.skipIf(!up)("PgDeliveryLog (Postgres)", () => {
  let db: { url: string; drop: () => Promise<void> }
  beforeAll(async () => {
    db = await freshDatabase("pglog")
  })
  afterAll(async () => {
    await db?.drop()
  })
  let n = 0
  /** A log on a table of its own, in its own Scope and client. */
  const withLog = <A, E>(
    f: (log: PgDeliveryLog.PgDeliveryLog, table: string) => Effect.Effect<A, E>,
    table?: string
  ) => {
    const name = table ?? `outbox_${++n}`
    return Effect.scoped(Effect.flatMap(PgDeliveryLog.make({ table: name }), (log) => f(log, name))).pipe(
      Effect.provide(Postgres.layer(db.url, { maxConnections: 4 }))
    )
  }

  it.live("append is durable: a second process (client) sees the entry once append returned", () =>
    Effect.gen(function*() {
      const entry = yield* withLog((log) => log.append({ channel: "c", to: "alice", body: { text: "hi" } }), "durable")
      const seen = yield* withLog((log) => log.get(entry.id), "durable")
      assert.deepStrictEqual(Option.getOrThrow(seen), entry)
    }))

  it.live("a table made before the attempt-started mark gets its column on open; its rows stay; the mark survives a new client", () =>
    Effect.gen(function*() {
      const table = "outbox_before_mark"
      yield* Effect.scoped(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        // The outbox table as it was created before `attempt_started` existed.
        yield* sql.unsafe(`CREATE TABLE ${table} (
          seq bigserial PRIMARY KEY, id text NOT NULL UNIQUE, channel text NOT NULL, recipient text NOT NULL,
          body text NOT NULL, idempotency_key text, enqueued_at bigint NOT NULL, attempts integer NOT NULL DEFAULT 0,
          last_error text, next_attempt_at bigint, status text NOT NULL, acked_at bigint, lease_owner text, lease_until bigint)`)
        yield* sql.unsafe(
          `INSERT INTO ${table} (id, channel, recipient, body, enqueued_at, status) VALUES ('old-1', 'c', 'x', '1', 5, 'pending')`
        )
      })).pipe(Effect.provide(Postgres.layer(db.url, { maxConnections: 1 })))
      const old = yield* withLog((log) =>
        Effect.gen(function*() {
          const pending = yield* log.pending
          assert.deepStrictEqual(pending.map((e) => [e.id, e.maybeSent]), [["old-1", undefined]])
          yield* log.markStarted!("old-1")
          return pending[0]!
        }), table)
      const after = yield* withLog((log) => log.get(old.id), table)
      assert.isTrue(Option.getOrThrow(after).maybeSent, "the mark is committed: another client reads it")
      yield* withLog((log) => log.attempt(old.id, { error: "x", nextAttemptAt: 0 }), table)
      assert.isUndefined(Option.getOrThrow(yield* withLog((log) => log.get(old.id), table)).maybeSent)
    }))

  it.live("seq increases with every append and pending is oldest first", () =>
    withLog((log) =>
      Effect.gen(function*() {
        const a = yield* log.append({ channel: "c", to: "x", body: 1 })
        const b = yield* log.append({ channel: "c", to: "y", body: 2 })
        const c = yield* log.append({ channel: "c", to: "x", body: 3 })
        assert.isTrue(a.seq < b.seq && b.seq < c.seq)
        assert.deepStrictEqual((yield* log.pending).map((e) => e.id), [a.id, b.id, c.id])
      })
    ))

  it.live("claim hands out only the head of each recipient: per-recipient order is kept", () =>
    withLog((log) =>
      Effect.gen(function*() {
        const x1 = yield* log.append({ channel: "c", to: "x", body: 1 })
        const x2 = yield* log.append({ channel: "c", to: "x", body: 2 })
        const y1 = yield* log.append({ channel: "c", to: "y", body: 3 })
        const first = yield* log.claim({ owner: "p1", limit: 10, leaseMs: 60_000 })
        assert.deepStrictEqual(first.map((e) => e.id), [x1.id, y1.id])
        // x2 waits behind x1 even for another owner, even after x1 failed an attempt (not due yet)
        yield* log.attempt(x1.id, { error: "boom", nextAttemptAt: Date.now() + 60_000 })
        assert.deepStrictEqual((yield* log.claim({ owner: "p2", limit: 10, leaseMs: 60_000 })).map((e) => e.id), [])
        yield* log.ack(x1.id)
        assert.deepStrictEqual((yield* log.claim({ owner: "p2", limit: 10, leaseMs: 60_000 })).map((e) => e.id), [
          x2.id
        ])
      })
    ))

  it.live("ackAndClaim acks and claims in one statement: an acked head's next entry is claimed with it; a dead entry stays dead", () =>
    withLog((log) =>
      Effect.gen(function*() {
        const x1 = yield* log.append({ channel: "c", to: "x", body: 1 })
        const x2 = yield* log.append({ channel: "c", to: "x", body: 2 })
        const y1 = yield* log.append({ channel: "c", to: "y", body: 3 })
        const z1 = yield* log.append({ channel: "c", to: "z", body: 4 })
        const first = yield* log.claim({ owner: "p", limit: 2, leaseMs: 60_000 })
        assert.deepStrictEqual(first.map((e) => e.id), [x1.id, y1.id])
        yield* log.deadLetter(y1.id, "permanent")
        // x1 delivered: acked, and x2 (now x's head) claimed in the same statement, with z1
        const next = yield* log.ackAndClaim({ acks: [x1.id, y1.id], owner: "p", limit: 10, leaseMs: 60_000 })
        assert.deepStrictEqual(next.map((e) => e.id), [x2.id, z1.id])
        assert.deepStrictEqual((yield* log.pending).map((e) => e.id), [x2.id, z1.id])
        assert.deepStrictEqual((yield* log.dead).map((e) => e.id), [y1.id])
        // acks alone (no room to claim)
        assert.deepStrictEqual(yield* log.ackAndClaim({ acks: [x2.id], owner: "p", limit: 0, leaseMs: 60_000 }), [])
        assert.deepStrictEqual((yield* log.pending).map((e) => e.id), [z1.id])
      })
    ))

  it.live("a dead-lettered head lets the next entry of its recipient through", () =>
    withLog((log) =>
      Effect.gen(function*() {
        const x1 = yield* log.append({ channel: "c", to: "x", body: 1 })
        const x2 = yield* log.append({ channel: "c", to: "x", body: 2 })
        yield* log.deadLetter(x1.id, "permanent")
        assert.deepStrictEqual((yield* log.claim({ owner: "p", limit: 10, leaseMs: 1000 })).map((e) => e.id), [x2.id])
        assert.deepStrictEqual((yield* log.dead).map((e) => e.id), [x1.id])
      })
    ))

  it.live("none delivers an entry twice while both live: concurrent claims never share an entry", () =>
    withLog((log) =>
      Effect.gen(function*() {
        for (let i = 0; i < 60; i++) yield* log.append({ channel: "c", to: `r${i % 20}`, body: i })
        const seen = new Map<string, string>()
        const worker = (owner: string) =>
          Effect.gen(function*() {
            for (let round = 0; round < 40; round++) {
              const got = yield* log.claim({ owner, limit: 5, leaseMs: 60_000 })
              for (const e of got) {
                assert.isFalse(seen.has(e.id), `entry ${e.id} claimed by ${seen.get(e.id)} and ${owner}`)
                seen.set(e.id, owner)
                yield* log.ack(e.id)
              }
              if (got.length === 0 && (yield* log.stats).pending === 0) return
            }
          })
        yield* Effect.all([worker("a"), worker("b"), worker("c")], { concurrency: "unbounded" })
        assert.strictEqual(seen.size, 60)
        assert.strictEqual((yield* log.stats).pending, 0)
      })
    ))

  it.live("a lease that ran out is claimable again; release gives it back at once", () =>
    withLog((log) =>
      Effect.gen(function*() {
        const e = yield* log.append({ channel: "c", to: "x", body: 1 })
        assert.strictEqual((yield* log.claim({ owner: "a", limit: 1, leaseMs: 1 })).length, 1)
        yield* Effect.sleep("5 millis") // the lease is 1 ms of wall clock: this waits it out, no hope involved
        assert.deepStrictEqual((yield* log.claim({ owner: "b", limit: 1, leaseMs: 60_000 })).map((x) => x.id), [e.id])
        assert.deepStrictEqual(yield* log.leased("b"), [e.id])
        assert.strictEqual((yield* log.claim({ owner: "a", limit: 1, leaseMs: 60_000 })).length, 0)
        yield* log.release(e.id, "b")
        assert.strictEqual((yield* log.claim({ owner: "a", limit: 1, leaseMs: 60_000 })).length, 1)
      })
    ))

  it.live("idempotency: an append with a known key returns that entry and writes nothing", () =>
    withLog((log) =>
      Effect.gen(function*() {
        const a = yield* log.append({ channel: "c", to: "x", body: 1, idempotencyKey: "k" })
        const b = yield* log.append({ channel: "c", to: "x", body: 2, idempotencyKey: "k" })
        assert.strictEqual(b.id, a.id)
        yield* log.ack(a.id)
        const c = yield* log.append({ channel: "c", to: "x", body: 3, idempotencyKey: "k" })
        assert.strictEqual(c.id, a.id) // acked within the window
        assert.strictEqual((yield* log.stats).pending, 0)
      })
    ))

  it.live("bad input fails with its reason and writes nothing; unknown ids fail unknown-id; ack is idempotent", () =>
    withLog((log) =>
      Effect.gen(function*() {
        const cyclic: Record<string, unknown> = {}
        cyclic.self = cyclic
        const reasons = yield* Effect.all([
          log.append({ channel: "", to: "x", body: 1 }),
          log.append({ channel: "c", to: "", body: 1 }),
          log.append({ channel: "c", to: "x", body: cyclic }),
          log.append({ channel: "c", to: "x", body: "x".repeat(2 * 1024 * 1024) }),
          log.ack("nope"),
          log.attempt("nope", { error: "e", nextAttemptAt: 0 })
        ].map((e) => Effect.flip(e).pipe(Effect.map((err) => err.reason))))
        assert.deepStrictEqual(reasons, ["invalid", "invalid", "invalid", "too-large", "unknown-id", "unknown-id"])
        assert.strictEqual((yield* log.stats).pending, 0)
        const e = yield* log.append({ channel: "c", to: "x", body: 1 })
        yield* log.ack(e.id)
        yield* log.ack(e.id)
        assert.isTrue(Option.isNone(yield* log.get(e.id)))
      })
    ))

  it.live("after its Scope closes every call fails closed", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const log = yield* PgDeliveryLog.make({ table: "closing" }).pipe(Scope.provide(scope))
      yield* Scope.close(scope, Exit.void)
      const err = yield* Effect.flip(log.append({ channel: "c", to: "x", body: 1 }))
      assert.strictEqual(err.reason, "closed")
    }).pipe(Effect.provide(Postgres.layer(db.url, { maxConnections: 2 }))))
})
