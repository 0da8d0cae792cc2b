/**
 * The effect/cluster runtime of one runner: sharding over TCP sockets between runners, shard locks and
 * runner registry (`SqlRunnerStorage`) and persisted messages (`SqlMessageStorage`) in Postgres, on a
 * schema created beforehand under one lock.
 */
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import * as NodeCrypto from "@effect/platform-node/NodeCrypto"
import { Duration, Effect, Layer, Option } from "effect"
import { RunnerAddress, ShardingConfig, SqlRunnerStorage } from "effect/cluster"
import * as Fencing from "./Fencing.js"
import * as Migrations from "./Migrations.js"
import * as Postgres from "./Postgres.js"
import * as Storage from "./Storage.js"

/** Where a runner listens for the other runners, and its timing. */
export interface ClusterLayerOptions {
  /** Postgres URL shared by every runner. */
  readonly postgres: string
  /** Host the other runners reach this one at; default `127.0.0.1`. */
  readonly host?: string
  /** Port of the runner-to-runner socket. */
  readonly port: number
  /** Shards per group; every runner of a cluster must use the same value. Default 64. */
  readonly shardsPerGroup?: number
  /**
   * How often the runner reads the runners' registry and recomputes the shard assignments; default 1 s
   * (effect/cluster: 3 s). A dead runner's shards move within the lease plus this; a runner that leaves
   * or joins is seen by the others within this. (2 s saved ~1 ms of CPU a second per runner and cost up
   * to a second of failover, and the SIGSTOP fencing test ~8 s: not kept.)
   */
  readonly refreshAssignmentsInterval?: Duration.Input
  /**
   * The shard lease: how long a runner that stopped answering (dead, or stalled with its connection
   * open: Postgres ends its idle lock session after this) keeps its shards; default 10 s.
   */
  readonly shardLockExpiration?: Duration.Input
  /** How often a client polls storage for replies of remote runs; default 50 ms (effect/cluster: 200 ms). */
  readonly entityReplyPollInterval?: Duration.Input
  /**
   * How often a runner reads unprocessed persisted messages of its shards, a fallback only: a persisted
   * message is read at once when it is saved here or its sender notifies this runner, and a shard's are
   * read when it is acquired. Default 5 s (effect/cluster: 10 s).
   */
  readonly entityMessagePollInterval?: Duration.Input
  /**
   * How long a shard lock refresh answers effect/cluster's lock check before a reply (Fencing.ts); 0
   * refreshes before every reply. Default, and at most, 90 % of the interval of the periodic refresh
   * (a third of the lease): that refresh still runs every interval (it writes the runner's heartbeat)
   * and each reply reuses the last one.
   */
  readonly lockCheckReuseMs?: number
  /** Pool size of this runner's Postgres client; default 10. */
  readonly maxConnections?: number
  /**
   * Connections the pool keeps open while idle (it closes unused ones after 60 s otherwise); default 0. A
   * runner keeps the ones it warmed at its start (Warmup.ts), so they stay warm.
   */
  readonly minConnections?: number
  /** Table prefix of switchyard's tables, created with effect/cluster's; default `switchyard`. */
  readonly prefix?: string
}

/**
 * The cluster runtime (Sharding, Runners, MessageStorage, the shards' fencing `Fence`, the storage's `Saved`) plus the Postgres client it uses. The whole
 * schema (effect/cluster's tables and switchyard's of `prefix`) is created first, once, under one lock
 * (`Migrations.migrate`), so runners that start together on an empty database never race on it;
 * effect/cluster's storage then runs without migrations of its own.
 */
export const layer = (options: ClusterLayerOptions) => {
  const leaseMs = Duration.toMillis(Duration.fromInputUnsafe(options.shardLockExpiration ?? "10 seconds"))
  // The locks (and the runner's heartbeat) are refreshed every third of the lease, effect/cluster's bound:
  // a live runner gets three tries before it counts as gone, and a dead one's shards move between 2/3 of
  // the lease and the lease after its death, plus the registry read. (Until session 13 every 2 s, or a
  // third of the lease if shorter.)
  const refreshMs = Math.floor(leaseMs / 3)
  const reuseMs = Math.min(options.lockCheckReuseMs ?? Infinity, Math.floor(0.9 * refreshMs))
  const shardingConfig: Partial<ShardingConfig.ShardingConfig["Service"]> = {
    runnerAddress: Option.some(RunnerAddress.make(options.host ?? "127.0.0.1", options.port)),
    shardsPerGroup: options.shardsPerGroup ?? 64,
    refreshAssignmentsInterval: options.refreshAssignmentsInterval ?? "1 second",
    shardLockRefreshInterval: Duration.millis(refreshMs),
    shardLockExpiration: options.shardLockExpiration ?? "10 seconds",
    entityReplyPollInterval: options.entityReplyPollInterval ?? "50 millis",
    entityMessagePollInterval: options.entityMessagePollInterval ?? "5 seconds",
    sendRetryInterval: "50 millis",
    // A local send would otherwise encode and decode each message as if it crossed runners (a test aid
    // of effect/cluster's: our payloads are JSON values already, checked at dispatch).
    simulateRemoteSerialization: false
  }
  const schema = Layer.effectDiscard(
    Effect.orDie(Migrations.migrate(options.prefix === undefined ? {} : { prefix: options.prefix }))
  )
  const storage = Layer.mergeAll(
    // SqlMessageStorage's driver; a dispatch learns when its Run is durable from it (one send per run),
    // and a turn's writes commit with its run's reply (Storage.ts).
    Storage.layer.pipe(Layer.provide(NodeCrypto.layerDigest)),
    // Shards this runner acquires get a new fencing epoch first; the lock check before each reply reuses
    // the last refresh of its shard (Fencing.ts).
    Fencing.layer(options.prefix, { refreshReuseMs: reuseMs })(
      SqlRunnerStorage.layerStorage({})
    )
  ).pipe(Layer.provide(ShardingConfig.layerFromEnv(shardingConfig)), Layer.provide(schema))
  return NodeClusterSocket.layer({ storage: "byo", shardingConfig }).pipe(
    Layer.provideMerge(storage),
    Layer.provideMerge(
      Postgres.layer(options.postgres, {
        maxConnections: options.maxConnections ?? 10,
        ...(options.minConnections === undefined ? {} : { minConnections: options.minConnections })
      })
    )
  )
}
