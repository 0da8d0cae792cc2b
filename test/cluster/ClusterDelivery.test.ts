/** Delivering one Postgres outbox from several processes (here: several deliverers with their own clients). */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Layer } from "effect"
import { afterAll, beforeAll } from "vitest"
import * as ClusterDelivery from "../../src/cluster/ClusterDelivery.js"
import * as PgDeliveryLog from "../../src/cluster/PgDeliveryLog.js"
import * as Postgres from "../../src/cluster/Postgres.js"
import { DeliveryFailure } from "../../src/delivery/errors.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"
import { freshDatabase, postgresAvailable } from "./pg.js"

const up = await postgresAvailable("test/cluster/ClusterDelivery.test.ts")

describe.skipIf(!up)("ClusterDelivery (Postgres)", () => {
  let db: { url: string; drop: () => Promise<void> }
  beforeAll(async () => {
    db = await freshDatabase("pgdeliver")
  })
  afterAll(async () => {
    await db?.drop()
  })
  /** A deliverer with its own Postgres client, as a separate process would have. */
  const deliverer = (
    table: string,
    owner: string,
    deliver: (e: DeliveryEntry) => Effect.Effect<void, DeliveryFailure>,
    pollMs = 20
  ) =>
    Effect.gen(function*() {
      // the client lives in the test's Scope, as long as the deliverer
      const client = yield* Layer.build(Postgres.layer(db.url, { maxConnections: 3 }))
      const log = yield* PgDeliveryLog.make({ table }).pipe(Effect.provideContext(client))
      // acks batched with claims (batchMs): still each entry once, in order
      return yield* ClusterDelivery.make({ log, deliver, owner, pollMs, backoffMs: [10], jitter: 0, batchMs: 5 })
    })

  it.live("three deliverers on one outbox: every entry delivered exactly once, in seq order per recipient; every ack written when they stop", () =>
    Effect.scoped(Effect.gen(function*() {
      const table = "three"
      const delivered: Array<{ id: string; seq: number; to: string; by: string }> = []
      const total = 90
      const allDone = yield* Deferred.make<void>()
      const record = (by: string) => (e: DeliveryEntry) =>
        Effect.sync(() => {
          delivered.push({ id: e.id, seq: e.seq, to: e.message.to, by })
          if (delivered.length === total) Deferred.doneUnsafe(allDone, Effect.void)
        })
      // The deliverers stop (their Scope closes) once all was delivered: the acks they still held are written.
      yield* Effect.scoped(Effect.gen(function*() {
        const a = yield* deliverer(table, "a", record("a"))
        yield* deliverer(table, "b", record("b"))
        yield* deliverer(table, "c", record("c"))
        for (let i = 0; i < total; i++) yield* a.enqueue({ channel: "test", to: `r${i % 9}`, body: i })
        yield* Deferred.await(allDone)
      }))
      const client = yield* Layer.build(Postgres.layer(db.url, { maxConnections: 1 }))
      const log = yield* PgDeliveryLog.make({ table }).pipe(Effect.provideContext(client))
      assert.deepStrictEqual(yield* log.pending, [])
      assert.strictEqual(new Set(delivered.map((d) => d.id)).size, total)
      const byRecipient = new Map<string, Array<number>>()
      for (const d of delivered) byRecipient.set(d.to, [...(byRecipient.get(d.to) ?? []), d.seq])
      for (const seqs of byRecipient.values()) assert.deepStrictEqual(seqs, [...seqs].sort((x, y) => x - y))
    })))

  it.live("a failed attempt is recorded and retried after its backoff; a permanent failure goes to the dead letters", () =>
    Effect.scoped(Effect.gen(function*() {
      const table = "retries"
      let calls = 0
      const done = yield* Deferred.make<void>()
      const d = yield* deliverer(table, "a", (e) =>
        Effect.suspend(() => {
          calls++
          if (e.message.body === "dead") {
            return Effect.fail(new DeliveryFailure({ message: "no such user", permanent: true }))
          }
          if (e.attempts === 0) return Effect.fail(new DeliveryFailure({ message: "flaky" }))
          Deferred.doneUnsafe(done, Effect.void)
          return Effect.void
        }))
      const dead = yield* d.enqueue({ channel: "test", to: "x", body: "dead" })
      yield* d.enqueue({ channel: "test", to: "x", body: "retry" })
      yield* Deferred.await(done)
      const client = yield* Layer.build(Postgres.layer(db.url, { maxConnections: 1 }))
      const log = yield* PgDeliveryLog.make({ table }).pipe(Effect.provideContext(client))
      assert.deepStrictEqual((yield* log.dead).map((e) => e.id), [dead.id])
      assert.strictEqual(calls, 3)
    })))

  it.live("stop delivers what is due before it leaves: entries appended by another process after the loop's last claim, with no wake", () =>
    Effect.scoped(Effect.gen(function*() {
      const table = "last"
      const delivered: Array<unknown> = []
      const other = yield* PgDeliveryLog.make({ table }).pipe(
        Effect.provideContext(yield* Layer.build(Postgres.layer(db.url, { maxConnections: 1 })))
      )
      const own = yield* PgDeliveryLog.make({ table }).pipe(
        Effect.provideContext(yield* Layer.build(Postgres.layer(db.url, { maxConnections: 2 })))
      )
      // The deliverer's log tells when its loop's first claim (of an empty outbox) is over.
      const firstClaim = yield* Deferred.make<void>()
      const log: typeof own = {
        ...own,
        ackAndClaim: (o) => Effect.ensuring(own.ackAndClaim(o), Deferred.succeed(firstClaim, undefined))
      }
      // Its poll is a minute: after the first claim only a wake (none here) or the stop claims again.
      const d = yield* ClusterDelivery.make({
        log,
        deliver: (e) => Effect.sync(() => delivered.push(e.message.body)),
        owner: "a",
        pollMs: 60_000
      })
      yield* Deferred.await(firstClaim)
      for (let i = 0; i < 3; i++) yield* other.append({ channel: "test", to: "x", body: i })
      yield* d.stop(5_000)
      assert.deepStrictEqual(delivered, [0, 1, 2])
      assert.deepStrictEqual(yield* other.pending, [])
    })))

  it.live("with a backlog the loop claims again once its attempts ended, not batchMs after: acks of a full batch in one statement each", () =>
    Effect.scoped(Effect.gen(function*() {
      const table = "backlog"
      const client = yield* Layer.build(Postgres.layer(db.url, { maxConnections: 3 }))
      const log = yield* PgDeliveryLog.make({ table }).pipe(Effect.provideContext(client))
      // Six entries wait before the loop starts; two slots. A minute of batching or polling would outlast the test.
      for (let i = 0; i < 6; i++) yield* log.append({ channel: "test", to: `r${i}`, body: i })
      const delivered: Array<number> = []
      const all = yield* Deferred.make<void>()
      const deliverer = ClusterDelivery.make({
        log,
        owner: "one",
        concurrency: 2,
        batchMs: 60_000,
        pollMs: 60_000,
        deliver: (e) =>
          Effect.sync(() => {
            delivered.push(e.message.body as number)
            if (delivered.length === 6) Deferred.doneUnsafe(all, Effect.void)
          })
      })
      yield* Effect.scoped(Effect.andThen(deliverer, Deferred.await(all)))
      assert.deepStrictEqual([...delivered].sort(), [0, 1, 2, 3, 4, 5])
      assert.deepStrictEqual(yield* log.pending, [])
    })))
})
