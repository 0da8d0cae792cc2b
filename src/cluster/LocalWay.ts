/**
 * The local way: a volatile run (`RunNow`) of a key whose shard this runner holds goes straight into the
 * local `CommandQueue`, without effect/cluster's send (its sharding, entity manager, mailbox and replier);
 * it is admitted as the key's entity would admit it (KeyRun.ts) and shares the key's state with the entity
 * (KeyState.ts), so the entity recognises it by its id. Runs that came this way are stopped when their
 * shard is let go (Fencing.ts `beforeRelease`), before its lock goes, as the entities' runs are when
 * their entities stop. See docs/cluster.md "The local way".
 */
import { Deferred, Effect, Exit, Option } from "effect"
import type { Scope } from "effect"
import { EntityId } from "effect/cluster"
import type { Sharding } from "effect/cluster"
import type { FenceShape } from "./Fencing.js"
import type { OnRun } from "./KeyRun.js"
import { stopRuns } from "./KeyState.js"
import type { Keys, RunPayload, Sink } from "./KeyState.js"
import { entityId, KeyEntity } from "./protocol.js"

/**
 * Runs `p` the local way: its answer, or `undefined` when it was not answered here (this runner does not
 * hold the shard, or let it go meanwhile, or the run was fenced).
 */
export type LocalRun = (p: RunPayload) => Effect.Effect<Exit.Exit<unknown, unknown> | undefined>

/** Starts the local way for the Scope's lifetime (with a fence only: without one nothing runs this way). */
export const start = (options: {
  readonly fence: Option.Option<FenceShape>
  readonly sharding: Sharding.Sharding["Service"]
  readonly keys: Keys
  readonly onRun: OnRun
}): Effect.Effect<LocalRun, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { fence, sharding, keys, onRun } = options
    const runnerScope = yield* Effect.scope

    // Local runs of shards this runner lets go are stopped before their locks go, as their entities are.
    if (Option.isSome(fence)) {
      const remove = fence.value.beforeRelease((shards) =>
        Effect.forEach(
          keys.ofShards(shards),
          // At shutdown (`"all"`) no other runner took the shards: nothing to report as fenced.
          (k) => stopRuns(fence, k, (isLocal) => isLocal, [], shards !== "all"),
          { concurrency: "unbounded", discard: true }
        )
      )
      yield* Effect.addFinalizer(() => Effect.sync(remove))
    }

    return (p: RunPayload): Effect.Effect<Exit.Exit<unknown, unknown> | undefined> =>
      Effect.suspend(() => {
        const id = entityId(p.lane, p.key)
        const shardId = sharding.getShardId(EntityId.make(id), KeyEntity.getShardGroup(EntityId.make(id)))
        const shard = `${shardId.group}:${shardId.id}`
        // Only a shard held both by effect/cluster and by the fence (epoch bumped, not let go): its release
        // waits for what starts here (Fencing.ts `beforeRelease`).
        if (Option.isNone(fence) || !fence.value.holds(shard) || !sharding.hasShardId(shardId)) {
          return Effect.succeed(undefined)
        }
        const key = keys.acquire(id, shard)
        const answered = Deferred.makeUnsafe<Exit.Exit<unknown, unknown> | undefined>()
        let ended = false
        const sink: Sink = {
          tag: "RunNow",
          complete: (exit) => Effect.sync(() => Deferred.doneUnsafe(answered, Exit.succeed(exit))),
          fork: (effect) => Effect.forkIn(effect, runnerScope)
        }
        const onEnd = () => {
          if (ended) return
          ended = true
          keys.release(id, key)
          // No answer sent here (left, fenced): the caller sends the run the usual way.
          Deferred.doneUnsafe(answered, Exit.succeed(undefined))
        }
        return Effect.andThen(
          onRun(key, sink, p, { onEnd }).pipe(
            Effect.onExit((exit) => Exit.isFailure(exit) ? Effect.sync(onEnd) : Effect.void)
          ),
          Deferred.await(answered)
        )
      })
  })
