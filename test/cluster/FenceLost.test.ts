/**
 * A runner whose turn was fenced forgets the shard (Fencing.ts `lost`): when Postgres has a newer epoch
 * than the one the turn started under, and that is still this runner's, no run of the shard starts here
 * until the runner acquires it again, instead of every run that reached it before effect/cluster's next
 * lock refresh running a whole turn (a model call) only to be fenced at its commit (seen with two
 * runners, SIGSTOP past the lease then SIGCONT: the stale runner ran the same run twice, 6 s of model
 * each, fenced both times). Real Postgres; the other runner is a statement that bumps the epoch.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Schedule } from "effect"
import { EntityId, Sharding } from "effect/cluster"
import { SqlClient } from "effect/sql"
import * as ClusterQueue from "../../src/cluster/ClusterQueue.js"
import * as Fencing from "../../src/cluster/Fencing.js"
import * as Migrations from "../../src/cluster/Migrations.js"
import * as Postgres from "../../src/cluster/Postgres.js"
import { KeyEntity } from "../../src/cluster/protocol.js"
import { postgresAvailable, query, useFreshDatabase } from "./pg.js"
import { freePort, runnerContext } from "./support.js"

const up = await postgresAvailable("test/cluster/FenceLost.test.ts")

describe.skipIf(!up)("a fenced turn makes its runner forget the shard (Postgres)", () => {
  const db = useFreshDatabase("fencelost")

  it.live(
    "lost: only when Postgres has a newer epoch than this runner's current one; acquired again, the shard is held at a new epoch",
    () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* Effect.orDie(Migrations.migrate({ cluster: false }))
        const fence = yield* Fencing.make()
        const shard = "default:3"
        assert.deepStrictEqual(yield* fence.claim([shard]), [shard])
        const epoch = fence.epochOf(shard)!
        // A Fenced failure while Postgres has this runner's epoch (a handler's own `_tag: "Fenced"`): nothing.
        assert.isFalse(yield* fence.lost(shard, epoch))
        assert.isTrue(fence.holds(shard))
        // Another runner takes the shard.
        yield* sql.unsafe(`UPDATE switchyard_shard_epochs SET epoch = epoch + 1, owner = 'other' WHERE shard = $1`, [
          shard
        ])
        // A run of an epoch older than this runner's current one: not news about the current one.
        assert.isFalse(yield* fence.lost(shard, epoch - 1))
        assert.strictEqual(fence.epochOf(shard), epoch)
        assert.isTrue(yield* fence.lost(shard, epoch))
        assert.deepStrictEqual([fence.epochOf(shard), fence.holds(shard), fence.held()], [undefined, false, []])
        // Acquired again: a new epoch, held; a late report of the old epoch changes nothing.
        assert.deepStrictEqual(yield* fence.claim([shard]), [shard])
        assert.deepStrictEqual([fence.epochOf(shard), fence.holds(shard)], [epoch + 2, true])
        assert.isFalse(yield* fence.lost(shard, epoch))
        assert.strictEqual(fence.epochOf(shard), epoch + 2)
      }).pipe(Effect.provide(Postgres.layer(db.url, { maxConnections: 2 }))),
    30_000
  )

  it.live(
    "a turn that fails Fenced while its shard has a newer epoch: the runner forgets the shard's epoch",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const ctx = yield* runnerContext(db.url, yield* Effect.promise(freePort))
        const entity = EntityId.make("main/fenced-key")
        const shardId = Context.get(ctx, Sharding.Sharding).getShardId(entity, KeyEntity.getShardGroup(entity))
        const shard = `${shardId.group}:${shardId.id}`
        const fence = Context.get(ctx, Fencing.Fence)
        const held = yield* Effect.sync(() => fence.epochOf(shard)).pipe(
          Effect.repeat({ until: (e) => e !== undefined, schedule: Schedule.spaced("20 millis") }),
          Effect.timeout("20 seconds")
        )
        let runs = 0
        // The turn's commit finds the newer epoch (as ClusterAgent's fenced commit does): it fails Fenced.
        const handler = () =>
          Effect.suspend(() => {
            runs++
            return Effect.fail({ _tag: "Fenced" as const, message: "a newer epoch" })
          })
        const q = yield* ClusterQueue.make({
          handlers: { main: handler, cron: handler, heartbeat: handler },
          member: "fence-lost",
          drainTimeoutMs: 500
        }).pipe(Effect.provideContext(ctx))
        yield* Effect.promise(() =>
          query(db.url, `UPDATE switchyard_shard_epochs SET epoch = epoch + 1, owner = 'other' WHERE shard = $1`, [
            shard
          ])
        )
        yield* q.dispatch("main", "fenced-key", { text: "hi" })
        yield* Effect.sync(() => fence.epochOf(shard)).pipe(
          Effect.repeat({ until: (e) => e === undefined, schedule: Schedule.spaced("20 millis") }),
          Effect.timeout("20 seconds")
        )
        assert.isFalse(fence.holds(shard))
        assert.isAtLeast(runs, 1)
        assert.isNumber(held)
      })),
    60_000
  )
})
