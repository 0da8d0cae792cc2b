/**
 * One runner of a switchyard cluster, all parts in one Scope: the effect/cluster runtime over
 * Postgres, the cluster queue with the agent's lane handlers, the Postgres outbox and its deliverer,
 * cron jobs once per due time, and the HTTP ingress. Closing the Scope stops the ingress, drains the
 * queue (unfinished runs are replayed on other runners), lets deliveries in flight end, and leaves
 * the cluster (its shards move to the other runners).
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer } from "effect"
import type { Context, Scope } from "effect"
import * as AnthropicModel from "../agent/AnthropicModel.js"
import { ConsoleChannel, FileChannel } from "../agent/Channel.js"
import type { Channel } from "../agent/Channel.js"
import type { CronJob } from "../agent/CronJobs.js"
import { parseJobs } from "../agent/CronJobs.js"
import { Model } from "../agent/Model.js"
import * as ScriptedModel from "../agent/ScriptedModel.js"
import type { LaneLimits } from "../queue/CommandQueue.js"
import * as ClusterAgent from "./ClusterAgent.js"
import * as ClusterCronJobs from "./ClusterCronJobs.js"
import * as ClusterDelivery from "./ClusterDelivery.js"
import * as ClusterLayer from "./ClusterLayer.js"
import * as ClusterQueue from "./ClusterQueue.js"
import * as Ingress from "./Ingress.js"
import * as PgDeliveryLog from "./PgDeliveryLog.js"
import * as Retention from "./Retention.js"

/** Options of {@link start}. */
export interface RunnerOptions {
  /** Postgres URL shared by the cluster. */
  readonly postgres: string
  /** HTTP ingress port. */
  readonly port: number
  /** Runner-to-runner port; default `port + 1000`. */
  readonly clusterPort?: number
  /** Host of both listeners, and the address other runners use; default `127.0.0.1`. */
  readonly host?: string
  /** The runner's name in `/status`, turn records and leases; default `runner-<port>`. */
  readonly name?: string
  /** Scripted model latency (ms) when no Anthropic key is given; default 300. */
  readonly latencyMs?: number
  /** Talk to Claude instead of the scripted model. */
  readonly anthropic?: { readonly apiKey: string; readonly model?: string; readonly baseURL?: string }
  readonly cron?: ReadonlyArray<CronJob>
  /** Deliver replies by appending JSON lines to this file (default: print them). */
  readonly outboxFile?: string
  readonly lanes?: Readonly<Record<string, Partial<LaneLimits>>>
  readonly drainTimeoutMs?: number
  /** Every runner of a cluster must use the same value; default 64. */
  readonly shardsPerGroup?: number
  /** Table prefix of switchyard's own tables; default `switchyard`. */
  readonly prefix?: string
  /**
   * Bound on one delivery attempt, default 10_000. A runner's claim on an outbox entry lasts this plus
   * one second, which is also how long entries claimed by a runner that died wait before another delivers them.
   */
  readonly deliveryTimeoutMs?: number
  /** How long turn records, cron firings and processed cluster messages are kept; default 24 h. */
  readonly retainMs?: number
}

/** A running runner. */
export interface Runner {
  readonly name: string
  readonly queue: ClusterQueue.ClusterQueue
  readonly delivery: ClusterDelivery.ClusterDelivery
  readonly outbox: PgDeliveryLog.PgDeliveryLog
}

/** Starts a runner in the current Scope. */
export const start = (options: RunnerOptions): Effect.Effect<Runner, unknown, Scope.Scope> =>
  Effect.gen(function*() {
    const name = options.name ?? `runner-${options.port}`
    const prefix = options.prefix ?? "switchyard"
    const jobs = yield* parseJobs(options.cron ?? [])
    const cluster = (yield* Layer.build(ClusterLayer.layer({
      postgres: options.postgres,
      port: options.clusterPort ?? options.port + 1000,
      ...(options.host === undefined ? {} : { host: options.host }),
      ...(options.shardsPerGroup === undefined ? {} : { shardsPerGroup: options.shardsPerGroup })
    }))) as Context.Context<any>
    const provide = <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.provideContext(self, cluster) as Effect.Effect<A, E, Scope.Scope>

    const model = yield* Layer.build(
      options.anthropic === undefined
        ? ScriptedModel.layer({ latencyMs: options.latencyMs ?? 300 })
        : AnthropicModel.layer(options.anthropic)
    )
    yield* provide(ClusterAgent.migrate(prefix))
    yield* provide(ClusterCronJobs.migrate(prefix))
    const outbox = yield* provide(PgDeliveryLog.make({ table: `${prefix}_outbox` }))
    const channel: Channel = options.outboxFile === undefined
      ? ConsoleChannel()
      : yield* FileChannel({
        path: options.outboxFile,
        format: (entry) => ({ id: entry.id, to: entry.message.to, body: entry.message.body, by: name })
      })
    const attemptTimeoutMs = options.deliveryTimeoutMs ?? 10_000
    const delivery = yield* ClusterDelivery.make({
      log: outbox,
      deliver: channel.send,
      owner: name,
      attemptTimeoutMs,
      leaseMs: attemptTimeoutMs + 1_000
    })
    const handlers = yield* provide(ClusterAgent.handlers({ member: name, outbox, prefix, channel: channel.name })).pipe(
      Effect.provideService(Model, model.mapUnsafe.get(Model.key))
    )
    const queue = yield* provide(ClusterQueue.make({
      handlers,
      member: name,
      prefix,
      ...(options.lanes === undefined ? {} : { lanes: options.lanes }),
      ...(options.drainTimeoutMs === undefined ? {} : { drainTimeoutMs: options.drainTimeoutMs })
    }))
    if (jobs.length > 0) yield* provide(Layer.build(ClusterCronJobs.layer(jobs, queue, { prefix })))
    yield* provide(Retention.start({ outbox, prefix, ...(options.retainMs === undefined ? {} : { retainMs: options.retainMs }) }))
    yield* Ingress.serve({ queue, delivery, outbox, port: options.port, ...(options.host === undefined ? {} : { host: options.host }) })
    return { name, queue, delivery, outbox }
  })

/** The Postgres client type the runner uses, re-exported for callers that build their own. */
export type { PgClient }
