/**
 * The effect/cluster runtime of one runner: sharding over TCP sockets between runners, shard locks and
 * runner registry (`SqlRunnerStorage`) and persisted messages (`SqlMessageStorage`) in Postgres.
 */
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket"
import { Layer, Option } from "effect"
import type { Duration } from "effect"
import { RunnerAddress } from "effect/cluster"
import * as Postgres from "./Postgres.js"

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
  /** How often the runner reads the shard assignments; default 1 s (effect/cluster: 3 s). */
  readonly refreshAssignmentsInterval?: Duration.Input
  /** How long a dead runner's shard lock survives it when advisory locks are not released; default 10 s. */
  readonly shardLockExpiration?: Duration.Input
  /** How often a client polls storage for replies of remote runs; default 50 ms (effect/cluster: 200 ms). */
  readonly entityReplyPollInterval?: Duration.Input
  /** How often a runner reads unprocessed persisted messages; default 1 s. */
  readonly entityMessagePollInterval?: Duration.Input
  /** Pool size of this runner's Postgres client; default 10. */
  readonly maxConnections?: number
}

/** The cluster runtime (Sharding, Runners, MessageStorage) plus the Postgres client it uses. */
export const layer = (options: ClusterLayerOptions) =>
  NodeClusterSocket.layer({
    storage: "sql",
    shardingConfig: {
      runnerAddress: Option.some(RunnerAddress.make(options.host ?? "127.0.0.1", options.port)),
      shardsPerGroup: options.shardsPerGroup ?? 64,
      refreshAssignmentsInterval: options.refreshAssignmentsInterval ?? "1 second",
      shardLockRefreshInterval: "2 seconds",
      shardLockExpiration: options.shardLockExpiration ?? "10 seconds",
      entityReplyPollInterval: options.entityReplyPollInterval ?? "50 millis",
      entityMessagePollInterval: options.entityMessagePollInterval ?? "1 second",
      sendRetryInterval: "50 millis"
    }
  }).pipe(Layer.provideMerge(Postgres.layer(options.postgres, { maxConnections: options.maxConnections ?? 10 })))
