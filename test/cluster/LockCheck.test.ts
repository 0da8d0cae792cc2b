/**
 * effect/cluster's lock check before a reply (`RunnerStorage.refresh` of one shard) answered from a
 * recent refresh (Fencing.layer's `refreshReuseMs`): a refresh of shards that were all refreshed
 * within the window costs no statements; anything else, or later, goes to the storage. Time is the
 * TestClock; the storage is a fake that counts its refreshes (no Postgres needed). And a shard's release
 * waits for the fence's `beforeRelease` listeners (where LocalWay.ts stops the shard's local runs).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import { RunnerAddress, RunnerStorage } from "effect/cluster"
import * as ShardId from "effect/cluster/ShardId"
import { SqlClient } from "effect/sql"
import { TestClock } from "effect/testing"
import * as Fencing from "../../src/cluster/Fencing.js"

const address = RunnerAddress.make("127.0.0.1", 1)
const shard = (id: number) => ShardId.make("default", id)

/** A RunnerStorage whose refresh confirms the shards in `held` and records what it was asked (and releases in `released`). */
const fake = (held: Set<number>, calls: Array<ReadonlyArray<number>>, released: Array<string> = []) =>
  Layer.succeed(
    RunnerStorage.RunnerStorage,
    {
      refresh: (_address: RunnerAddress.RunnerAddress, shardIds: Iterable<ShardId.ShardId>) =>
        Effect.sync(() => {
          const asked = [...shardIds]
          calls.push(asked.map((s) => s.id))
          return asked.filter((s) => held.has(s.id))
        }),
      release: (_address: RunnerAddress.RunnerAddress, shardId: ShardId.ShardId) =>
        Effect.sync(() => released.push(ShardId.toString(shardId))),
      releaseAll: () => Effect.sync(() => released.push("all"))
    } as unknown as RunnerStorage.RunnerStorage["Service"]
  )

const withStorage = <A, E>(
  held: Set<number>,
  calls: Array<ReadonlyArray<number>>,
  f: (storage: RunnerStorage.RunnerStorage["Service"], fence: Fencing.FenceShape) => Effect.Effect<A, E>,
  released: Array<string> = []
) =>
  Effect.flatMap(
    Effect.all([Effect.service(RunnerStorage.RunnerStorage), Effect.service(Fencing.Fence)]),
    ([storage, fence]) => f(storage, fence)
  ).pipe(
    Effect.provide(
      Fencing.layer("switchyard", { refreshReuseMs: 2_500 })(fake(held, calls, released)).pipe(
        // The fence's statements run only when shards are acquired, which this test never does.
        Layer.provide(Layer.succeed(SqlClient.SqlClient, {} as SqlClient.SqlClient))
      )
    )
  )

describe("the lock check before a reply reuses a recent refresh", () => {
  it.effect("within refreshReuseMs a refresh of refreshed shards is answered from the last one, held or not; later, or with another shard, it asks the storage", () =>
    Effect.gen(function*() {
      const calls: Array<ReadonlyArray<number>> = []
      const held = new Set([1, 2])
      yield* withStorage(held, calls, (storage) =>
        Effect.gen(function*() {
          // the periodic refresh of every shard this runner holds (and one it lost)
          const all = yield* storage.refresh(address, [shard(1), shard(2), shard(3)])
          assert.deepStrictEqual(all.map((s) => s.id), [1, 2])
          yield* TestClock.adjust(1_000)
          // the checks before replies: answered from it
          assert.deepStrictEqual((yield* storage.refresh(address, [shard(1)])).map((s) => s.id), [1])
          assert.deepStrictEqual((yield* storage.refresh(address, [shard(3)])).map((s) => s.id), [])
          assert.deepStrictEqual(calls, [[1, 2, 3]])
          // a shard it has not refreshed: asked
          yield* storage.refresh(address, [shard(4)])
          assert.deepStrictEqual(calls, [[1, 2, 3], [4]])
          // the lock of shard 1 is lost; past the window, the check asks and sees it
          held.delete(1)
          yield* TestClock.adjust(1_600)
          assert.deepStrictEqual((yield* storage.refresh(address, [shard(1)])).map((s) => s.id), [])
          assert.deepStrictEqual(calls, [[1, 2, 3], [4], [1]])
          // a liveness probe (no shards) always reaches the storage
          yield* storage.refresh(address, [])
          assert.deepStrictEqual(calls, [[1, 2, 3], [4], [1], []])
          // a release forgets the shard
          yield* storage.release(address, shard(4))
          yield* storage.refresh(address, [shard(4)])
          assert.deepStrictEqual(calls, [[1, 2, 3], [4], [1], [], [4]])
        }))
    }))
})

describe("a shard's lock is released only after its beforeRelease listeners ended", () => {
  it.effect("release and releaseAll wait for every listener (which see the shards let go) before the storage releases", () =>
    Effect.gen(function*() {
      const released: Array<string> = []
      const seen: Array<ReadonlyArray<string> | "all"> = []
      const gate = yield* Deferred.make<void>()
      yield* withStorage(new Set(), [], (storage, fence) =>
        Effect.gen(function*() {
          fence.beforeRelease((shards) => Effect.andThen(Effect.sync(() => seen.push(shards)), Deferred.await(gate)))
          const releasing = yield* Effect.forkChild(storage.release(address, shard(5)))
          yield* Effect.yieldNow
          // the listener runs (the local runs of shard 5 are stopped there); the lock is still held
          assert.deepStrictEqual(seen, [["default:5"]])
          assert.deepStrictEqual(released, [])
          assert.isFalse(fence.holds("default:5"))
          yield* Deferred.succeed(gate, undefined)
          yield* Fiber.join(releasing)
          assert.deepStrictEqual(released, ["default:5"])
          yield* storage.releaseAll(address)
          assert.deepStrictEqual(seen, [["default:5"], "all"])
          assert.deepStrictEqual(released, ["default:5", "all"])
        }), released)
    }))
})
