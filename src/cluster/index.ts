/**
 * switchyard/cluster — scale-out on effect/cluster over Postgres: the cluster queue (one activation per
 * lane and key across processes, durable runs), the Postgres delivery log and its many-process
 * deliverer, cron once per due time, and the runner with its HTTP ingress. See docs/cluster.md.
 * Nothing in queue, delivery or agent imports this entry.
 *
 * Reading order, bottom-up (every file imports only files before it, and the other parts):
 * - `protocol.ts`, `json.ts`, `Coalesce.ts`, `Generations.ts`, `Postgres.ts`, `MigrationsSql.ts` -> `Migrations.ts`.
 * - The queue: `wire.ts`, `LaneHandler.ts` -> `KeyState.ts`, `KeyRun.ts` (a run on its key's
 *   runner), `LocalWay.ts` -> `KeyRunner.ts` (one key entity) -> `ClusterQueue.ts` ->
 *   `ClusterCronJobs.ts`. Delivery: `PgDeliveryLog.ts` -> `ClusterDelivery.ts`, `Retention.ts`.
 *   `ClusterAgent.ts` (turns as lane handlers), `ClusterLayer.ts`.
 * - `RunnerStatus.ts`, `IngressChecks.ts` -> `Ingress.ts` (HTTP) -> `Runner.ts` (all of it in one Scope) -> `runner-main.ts`.
 */
export * as ClusterAgent from "./ClusterAgent.js"
export type { CronCommand, MessageCommand, TurnResult } from "./ClusterAgent.js"
export * as ClusterCronJobs from "./ClusterCronJobs.js"
export * as ClusterDelivery from "./ClusterDelivery.js"
export type { ClusterDeliveryOptions } from "./ClusterDelivery.js"
export * as ClusterHeartbeat from "./ClusterHeartbeat.js"
export * as ClusterLayer from "./ClusterLayer.js"
export type { ClusterLayerOptions } from "./ClusterLayer.js"
export * as ClusterQueue from "./ClusterQueue.js"
export type {
  ClusterDispatchOptions,
  ClusterFuture,
  ClusterQueueOptions,
  ClusterTask,
  DrainOptions,
  LaneHandler
} from "./ClusterQueue.js"
export * as Fencing from "./Fencing.js"
export type { FenceToken } from "./Fencing.js"
export * as Generations from "./Generations.js"
export * as Ingress from "./Ingress.js"
export * as IngressApi from "./IngressApi.js"
export * as Migrations from "./Migrations.js"
export type { MigrateOptions } from "./Migrations.js"
export * as PgDeliveryLog from "./PgDeliveryLog.js"
export type { PgDeliveryLogOptions } from "./PgDeliveryLog.js"
export * as Postgres from "./Postgres.js"
export * as Retention from "./Retention.js"
export type { RetentionOptions } from "./Retention.js"
export * as Runner from "./Runner.js"
export type { RunnerOptions } from "./Runner.js"
export * as RunnerStatus from "./RunnerStatus.js"
