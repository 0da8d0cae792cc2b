/**
 * Fencing tokens: one epoch per shard in `<prefix>_shard_epochs (shard, epoch, owner)`, bumped each
 * time a runner acquires the shard.
 *
 * effect/cluster keeps a shard on one runner by a lock with a lease; a runner that stalls past the
 * lease (GC pause, SIGSTOP) loses it to another runner but may wake up in the middle of a turn and
 * finish it. So this runner's `RunnerStorage.acquire` is wrapped: every shard it acquires gets a new
 * epoch (`epoch + 1`, `owner` = this process' token) before effect/cluster starts any entity of it,
 * and the epoch is remembered here. A turn takes its shard's epoch when it starts; the statement that
 * makes the turn visible (outbox append, transcript, turn record) only writes when the shard's row
 * still has that epoch (`FOR SHARE`, re-checked against the newest row version by Postgres). A stale
 * runner's statement finds a newer epoch and writes nothing: the turn is fenced.
 *
 * The check is one statement, so the row lock lives only while it runs: a runner stopped between two
 * statements holds no lock a takeover would wait for.
 */
import { Clock, Context, Effect, Layer } from "effect"
import { RunnerStorage } from "effect/cluster"
import * as ShardId from "effect/cluster/ShardId"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"

/** This runner's fencing state. */
export interface FenceShape {
  /** Unique per process (a restarted runner of the same name gets a new one). */
  readonly token: string
  /** The epoch this runner gave `shard` (`group:id`) when it last acquired it, or `undefined`. */
  readonly epochOf: (shard: string) => number | undefined
  /** The epoch of `shard` in Postgres now (`undefined`: never claimed). */
  readonly current: (shard: string) => Effect.Effect<number | undefined, SqlError>
  /** Bumps the epochs of `shards` to this runner; returns the shards it now holds the epoch of. */
  readonly claim: (shards: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<string>, SqlError>
  /** The shards this runner acquired (epoch bumped) and has not released or lost since. */
  readonly held: () => ReadonlyArray<string>
  /**
   * Calls `listener` with the shards of each acquisition, once their epochs were bumped and before
   * effect/cluster runs anything of them (Replay.ts runs their unanswered inbox); returns its removal.
   */
  readonly onAcquired: (listener: (shards: ReadonlyArray<string>) => void) => () => void
  /** Whether this runner holds `shard` now: acquired (epoch bumped), not released or lost since. */
  readonly holds: (shard: string) => boolean
  /**
   * Runs `listener` when shards are let go (`"all"`: every shard, at shutdown), after they stopped being
   * held and before their locks are released: what runs of them outside effect/cluster's entities
   * (LocalWay.ts, the local way) is stopped there, as the entities are. Returns its removal.
   */
  readonly beforeRelease: (listener: (shards: ReadonlyArray<string> | "all") => Effect.Effect<void>) => () => void
  /**
   * A run of `shard` under `epoch` was fenced. When `epoch` is still the one this runner holds and
   * Postgres has a newer one (another runner took the shard while this one stalled), forgets the shard:
   * no run of it starts here until it is acquired again (a new epoch), instead of each run that reached
   * this runner before effect/cluster's next lock refresh noticed (hop lines, mailbox messages read
   * during the stall) running a whole turn (a model call) only to be fenced at its commit. Returns
   * whether it forgot the shard. A failed read forgets nothing.
   */
  readonly lost: (shard: string, epoch: number) => Effect.Effect<boolean>
}

export class Fence extends Context.Service<Fence, FenceShape>()("switchyard/cluster/Fence") {}

/** A turn's fencing token: its shard and the epoch it started under. */
export interface FenceToken {
  readonly shard: string
  readonly epoch: number
}

/** Why a turn's writes were refused: its shard has a newer epoch (another runner took it). */
export class Fenced extends Error {
  readonly _tag = "Fenced"
  constructor(readonly shard: string, readonly epoch: number, readonly runId: string) {
    super(
      `Expected shard ${shard} to be at epoch ${epoch} (this runner's), found a newer one: run ${runId} was fenced, its writes dropped`
    )
  }
}

/** The fence with what the wrapped RunnerStorage tells it: shards released or lost. */
interface FenceState extends FenceShape {
  readonly released: (shards: ReadonlyArray<string> | "all") => void
  /** The {@link FenceShape.beforeRelease} listeners, run one after the other (none fails). */
  readonly releasing: (shards: ReadonlyArray<string> | "all") => Effect.Effect<void>
}

/** The fence of this runner, on the schema's `<prefix>_shard_epochs`. */
export const make = (prefix = "switchyard"): Effect.Effect<FenceState, never, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const token = `${process.pid}-${crypto.randomUUID().slice(0, 12)}`
    const epochs = new Map<string, number>()
    const held = new Set<string>()
    const listeners = new Set<(shards: ReadonlyArray<string>) => void>()
    const releaseListeners = new Set<(shards: ReadonlyArray<string> | "all") => Effect.Effect<void>>()
    const claim = (shards: ReadonlyArray<string>) =>
      shards.length === 0 ? Effect.succeed([]) : Effect.map(
        sql.unsafe<{ readonly shard: string; readonly epoch: number }>(
          `INSERT INTO ${prefix}_shard_epochs (shard, epoch, owner, claimed_at)
           SELECT s, 1, $2, $3 FROM unnest($1::text[]) AS s ORDER BY s
           ON CONFLICT (shard) DO UPDATE SET epoch = ${prefix}_shard_epochs.epoch + 1, owner = EXCLUDED.owner, claimed_at = EXCLUDED.claimed_at
           RETURNING shard, epoch::float8 AS epoch`,
          [shards, token, Date.now()]
        ),
        (rows) => {
          for (const r of rows) {
            epochs.set(r.shard, Number(r.epoch))
            held.add(r.shard)
          }
          const claimed = rows.map((r) => r.shard)
          for (const listener of listeners) listener(claimed)
          return claimed
        }
      )
    const current = (shard: string) =>
      Effect.map(
        sql.unsafe<{ readonly epoch: number }>(
          `SELECT epoch::float8 AS epoch FROM ${prefix}_shard_epochs WHERE shard = $1`,
          [shard]
        ),
        (rows) => rows.length === 0 ? undefined : Number(rows[0].epoch)
      )
    return {
      token,
      epochOf: (shard) => epochs.get(shard),
      current,
      claim,
      held: () => [...held],
      onAcquired: (listener) => {
        listeners.add(listener)
        return () => listeners.delete(listener)
      },
      holds: (shard) => held.has(shard),
      beforeRelease: (listener) => {
        releaseListeners.add(listener)
        return () => releaseListeners.delete(listener)
      },
      released: (shards) => {
        if (shards === "all") held.clear()
        else for (const sh of shards) held.delete(sh)
      },
      lost: (shard, epoch) =>
        epochs.get(shard) !== epoch ? Effect.succeed(false) : current(shard).pipe(
          Effect.map((now) => {
            // Claimed again meanwhile (a newer epoch of this runner's own): nothing is lost.
            if (now === undefined || now <= epoch || epochs.get(shard) !== epoch) return false
            epochs.delete(shard)
            held.delete(shard)
            return true
          }),
          Effect.orElseSucceed(() => false)
        ),
      releasing: (shards) =>
        Effect.suspend(() =>
          Effect.forEach([...releaseListeners], (listener) => Effect.ignoreCause(listener(shards)), { discard: true })
        )
    }
  })

/**
 * The Fence plus effect/cluster's `RunnerStorage` wrapped so that the shards it acquires get a new
 * epoch first. A shard whose epoch could not be bumped is reported not acquired (its lock stays held;
 * effect/cluster asks again and the bump is retried), so no entity runs on a shard without an epoch.
 *
 * With `refreshReuseMs`, a refresh of shards that were all refreshed (locks confirmed, runner's heartbeat
 * written) within that many ms is answered from that refresh instead of two more statements. effect/cluster
 * refreshes a shard's lock before it saves each persisted reply (its `isShardOwned`); a run's reply is
 * saved here in one statement with the turn's writes under the shard's fencing epoch (Storage.ts), which
 * a new owner bumps before it runs anything, so that check adds nothing for runs but its cost. The
 * periodic refresh (every `shardLockRefreshInterval`) and the release of lost shards are unchanged.
 */
export const layer = (prefix = "switchyard", options: { readonly refreshReuseMs?: number } = {}) =>
<E, R>(
  storage: Layer.Layer<RunnerStorage.RunnerStorage, E, R>
): Layer.Layer<Fence | RunnerStorage.RunnerStorage, E, R | SqlClient.SqlClient> =>
  Layer.effectContext(Effect.gen(function*() {
    const fence = yield* make(prefix)
    const inner = yield* RunnerStorage.RunnerStorage
    const reuseMs = options.refreshReuseMs ?? 0
    // Per shard: when its last successful refresh started, and whether it confirmed the lock.
    const refreshed = new Map<string, { readonly at: number; readonly held: boolean }>()
    const wrapped: RunnerStorage.RunnerStorage["Service"] = {
      ...inner,
      acquire: (address, shardIds) =>
        Effect.flatMap(
          inner.acquire(address, shardIds),
          (acquired) =>
            fence.claim(acquired.map(ShardId.toString)).pipe(
              Effect.map((claimed) => {
                const ok = new Set(claimed)
                return acquired.filter((s) => ok.has(ShardId.toString(s)))
              }),
              Effect.catchCause((cause) =>
                Effect.as(Effect.logWarning("Could not bump the fencing epochs of acquired shards", cause), [])
              )
            )
        ),
      refresh: (address, shardIds) =>
        Effect.flatMap(Clock.currentTimeMillis, (startedAt) => {
          const shards = [...shardIds]
          if (reuseMs <= 0 || shards.length === 0) {
            return Effect.tap(inner.refresh(address, shards), (held) =>
              Effect.sync(() => {
                const ok = new Set(held.map(ShardId.toString))
                fence.released(shards.map(ShardId.toString).filter((k) => !ok.has(k)))
              }))
          }
          const recent = shards.map((s) => refreshed.get(ShardId.toString(s)))
          if (recent.every((r) => r !== undefined && r.at > startedAt - reuseMs)) {
            return Effect.succeed(shards.filter((_, i) => recent[i]!.held))
          }
          return Effect.tap(inner.refresh(address, shards), (held) =>
            Effect.sync(() => {
              const ok = new Set(held.map(ShardId.toString))
              for (const s of shards) {
                const k = ShardId.toString(s)
                refreshed.set(k, { at: startedAt, held: ok.has(k) })
              }
              fence.released(shards.map(ShardId.toString).filter((k) => !ok.has(k)))
            }))
        }),
      release: (address, shardId) =>
        Effect.suspend(() => {
          refreshed.delete(ShardId.toString(shardId))
          fence.released([ShardId.toString(shardId)])
          return Effect.andThen(fence.releasing([ShardId.toString(shardId)]), inner.release(address, shardId))
        }),
      releaseAll: (address) =>
        Effect.suspend(() => {
          refreshed.clear()
          fence.released("all")
          return Effect.andThen(fence.releasing("all"), inner.releaseAll(address))
        })
    }
    const shape: FenceShape = fence
    return Context.make(Fence, shape).pipe(Context.add(RunnerStorage.RunnerStorage, wrapped))
  })).pipe(Layer.provide(storage))
