/**
 * One runner of a switchyard cluster, all parts in one Scope: the effect/cluster runtime over
 * Postgres, the cluster queue with the agent's lane handlers, the Postgres outbox and its deliverer,
 * cron jobs once per due time, and the HTTP ingress. Closing the Scope stops the ingress, drains the
 * queue (unfinished runs are replayed on other runners), lets deliveries in flight end, and leaves
 * the cluster (its shards move to the other runners).
 */
import type { PgClient } from "@effect/sql-pg"
import { Deferred, Effect, Layer } from "effect"
import type { Context, Scope } from "effect"
import * as AnthropicModel from "../agent/AnthropicModel.js"
import { ConsoleChannel, FileChannel, replyOf } from "../agent/Channel.js"
import type { Channel } from "../agent/Channel.js"
import type { CronJob } from "../agent/CronJobs.js"
import { parseJobs } from "../agent/CronJobs.js"
import { Model } from "../agent/Model.js"
import * as ScriptedModel from "../agent/ScriptedModel.js"
import { DEFAULT_TURN_TIMEOUT_MS, withTurnTimeouts } from "../agent/turnTimeouts.js"
import type { DeliveryEntry } from "../delivery/types.js"
import type { DrainReport, LaneLimits } from "../queue/CommandQueue.js"
import * as ClusterAgent from "./ClusterAgent.js"
import * as ClusterCronJobs from "./ClusterCronJobs.js"
import * as ClusterDelivery from "./ClusterDelivery.js"
import * as ClusterHeartbeat from "./ClusterHeartbeat.js"
import * as ClusterLayer from "./ClusterLayer.js"
import * as ClusterQueue from "./ClusterQueue.js"
import * as Coalesce from "./Coalesce.js"
import { Fence } from "./Fencing.js"
import * as Hop from "./Hop.js"
import * as Inbox from "./Inbox.js"
import * as Ingress from "./Ingress.js"
import * as PgDeliveryLog from "./PgDeliveryLog.js"
import * as Retention from "./Retention.js"
import { probeListen } from "./StartupFailure.js"
import * as Warmup from "./Warmup.js"

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
  /**
   * A turn of `main`, `heartbeat` or `cron` with no progress this long (no streamed event) is cut and its
   * run fails `timeout`; a lane's own `turnTimeoutMs` in `lanes` wins. Default `DEFAULT_TURN_TIMEOUT_MS`
   * (5 minutes): a model stream stalled after its headers would otherwise hold its session's slot.
   */
  readonly turnTimeoutMs?: number
  /** Deadline of the whole shutdown (see {@link Runner.stop}); default 10_000. */
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
  /** One heartbeat turn per cluster every this many ms (a singleton); default none. */
  readonly heartbeatMs?: number
  /** Bearer token of the HTTP ingress (every route but `/healthz`); required for a non-loopback `host`. */
  readonly token?: string
  /** The shard lease (ms): a runner silent this long loses its shards (see Fencing.ts); default 10_000. */
  readonly leaseMs?: number
  /**
   * Send the ingress's runs to the HTTP ingress of their shard's owner (Hop.ts; every runner's `host` and
   * `port` reachable from the others) rather than over effect/cluster's runners' socket; default true.
   */
  readonly hop?: boolean
  /**
   * Run the ingress's messages of sessions whose shard this runner holds straight in the local lane, not
   * through their effect/cluster entity (ClusterQueue `localRuns`; docs/cluster.md "The local way"); default true.
   */
  readonly localRuns?: boolean
  /**
   * The sweep of unanswered ingress runs (Replay.ts): every `sweepMs` (default 2_000) it sends again the
   * runs of this runner's shards whose first message is older than `sweepAgeMs` (default 5_000): a send
   * lost with its dispatcher. A shorter age answers such a message sooner and sends runs still on their
   * way again more often (harmless: a run is recognised by its id, never run twice).
   */
  readonly sweepMs?: number
  readonly sweepAgeMs?: number
  /**
   * Postgres connections opened and warmed before the runner takes messages, and kept open while it is idle
   * (Warmup.ts; docs/cluster.md "Start-up and readiness"): each runs the message path's statements on inputs
   * of its own, in a transaction rolled back, so that the runner's first messages find warm backends.
   * Default {@link DEFAULT_WARM_CONNECTIONS}; 0 opens none ahead (the pool opens them at first use, cold).
   * At most the pool's size less one (effect/cluster holds one for its shard locks).
   */
  readonly warmConnections?: number
  /**
   * Record Effect spans (effect/cluster's requests, SQL statements, HTTP requests) for a tracer you
   * provide; default false: a span costs CPU on every message even when nothing reads it.
   */
  readonly tracing?: boolean
}

/** Postgres connections a runner warms at its start when {@link RunnerOptions.warmConnections} is not given. */
export const DEFAULT_WARM_CONNECTIONS = 4

/** The runner's Postgres pool size. */
const POOL_SIZE = 10

/** A running runner. */
export interface Runner {
  readonly name: string
  /** What the start's warm-up of Postgres connections did (Warmup.ts). */
  readonly warmed: Warmup.Warmed
  readonly queue: ClusterQueue.ClusterQueue
  readonly delivery: ClusterDelivery.ClusterDelivery
  readonly outbox: PgDeliveryLog.PgDeliveryLog
  /**
   * Starts the shutdown that closing the Scope finishes, all within `drainTimeoutMs` from this call:
   * the ingress takes no new messages; the runs this runner dispatched get until the deadline
   * (less {@link LEAVE_RESERVE_MS}) to be answered, and the clients waiting on them get their replies;
   * the runs still unanswered then stay durable in the cluster (their waiting clients get 202
   * `pending`). Closing the Scope then drains the local lanes within the same deadline, stops delivering
   * and leaves the cluster. Returns the drain's report; a second call waits for the first.
   */
  readonly stop: Effect.Effect<DrainReport>
}

/**
 * The part of the drain deadline kept for leaving: closing connections, giving back delivery leases,
 * effect/cluster handing this runner's shards back. At most a quarter of the deadline.
 */
export const LEAVE_RESERVE_MS = 1_500

/**
 * The JSON line a runner appends to `--outbox` per delivered reply: the chatbot's `{ id, session, text }`,
 * plus `deliveredBy`, the runner that delivered it (not always the one whose turn wrote it: see
 * `ClusterAgent.TurnResult`).
 */
export const outboxLine = (
  entry: DeliveryEntry,
  deliveredBy: string
): { readonly id: string; readonly session: string; readonly text: unknown; readonly deliveredBy: string } => {
  const reply = replyOf(entry)
  return {
    id: entry.id,
    session: reply?.session ?? entry.message.to,
    text: reply?.text ?? entry.message.body,
    deliveredBy
  }
}

/** Starts a runner in the current Scope. */
export const start = (options: RunnerOptions): Effect.Effect<Runner, unknown, Scope.Scope> =>
  Effect.withTracerEnabled(startTraced(options), options.tracing === true)

const startTraced = (options: RunnerOptions): Effect.Effect<Runner, unknown, Scope.Scope> =>
  Effect.gen(function*() {
    const name = options.name ?? `runner-${options.port}`
    if ((options.token ?? "") === "" && !Ingress.isLoopback(options.host ?? "127.0.0.1")) {
      return yield* Effect.fail(
        new Error(`Expected a token to listen on \`${options.host}\`, which is not a loopback address, got none`)
      )
    }
    const prefix = options.prefix ?? "switchyard"
    const jobs = yield* parseJobs(options.cron ?? [])
    const clusterPort = options.clusterPort ?? options.port + 1000
    const warmConnections = Math.min(
      POOL_SIZE - 1,
      Math.max(0, Math.floor(options.warmConnections ?? DEFAULT_WARM_CONNECTIONS))
    )
    // A port in use fails the start here, before this runner joins the cluster (and takes shards it would
    // hand back at once); the ingress listens last.
    for (const port of [options.port, clusterPort]) {
      yield* Effect.tryPromise({ try: () => probeListen(options.host ?? "127.0.0.1", port), catch: (e) => e })
    }
    const cluster = (yield* Layer.build(ClusterLayer.layer({
      postgres: options.postgres,
      port: clusterPort,
      prefix,
      maxConnections: POOL_SIZE,
      minConnections: warmConnections,
      ...(options.host === undefined ? {} : { host: options.host }),
      ...(options.shardsPerGroup === undefined ? {} : { shardsPerGroup: options.shardsPerGroup }),
      ...(options.leaseMs === undefined ? {} : { shardLockExpiration: options.leaseMs })
    }))) as Context.Context<any>
    const provide = <A, E, R>(self: Effect.Effect<A, E, R>) =>
      Effect.provideContext(self, cluster) as Effect.Effect<A, E, Scope.Scope>

    const model = yield* Layer.build(
      options.anthropic === undefined
        ? ScriptedModel.layer({ latencyMs: options.latencyMs ?? 300 })
        : AnthropicModel.layer(options.anthropic)
    )
    const outbox = yield* provide(PgDeliveryLog.make({ table: `${prefix}_outbox` }))
    const channel: Channel = options.outboxFile === undefined
      ? ConsoleChannel()
      : yield* FileChannel({ path: options.outboxFile, format: (entry) => outboxLine(entry, name) })
    const attemptTimeoutMs = options.deliveryTimeoutMs ?? 10_000
    const delivery = yield* ClusterDelivery.make({
      log: outbox,
      deliver: channel.send,
      owner: name,
      attemptTimeoutMs,
      leaseMs: attemptTimeoutMs + 1_000,
      // Acks and claims of replies that come close together share a statement. A turn's commit wakes the
      // loop, so the poll is only for entries of other runners, retries and leases that ran out.
      batchMs: 50,
      pollMs: 1_000
    })
    const drainTimeoutMs = options.drainTimeoutMs ?? 10_000
    const leaveMs = Math.min(LEAVE_RESERVE_MS, Math.floor(drainTimeoutMs / 4))
    let deadline: number | undefined
    /** Time left before the leave reserve, from the stop (or from now when the Scope closes without one). */
    const left = () => Math.max(0, (deadline ?? Date.now() + drainTimeoutMs) - leaveMs - Date.now())
    // Runs after the queue's finalizer (finalizers run newest first): replies of the last turns go out.
    yield* Effect.addFinalizer(() => Effect.suspend(() => delivery.stop(left())))
    const handlers = yield* provide(
      ClusterAgent.handlers({ member: name, outbox, prefix, channel: channel.name, onCommit: delivery.wake })
    )
      .pipe(
        Effect.provideService(Model, model.mapUnsafe.get(Model.key))
      )
    // The ingress's short way to the owners of its runs' shards (Hop.ts), and its side of it: runs other
    // runners' ingresses send here go to their key's entity as local sends.
    const fence = yield* provide(Effect.service(Fence))
    const hop = yield* provide(
      Hop.make({ self: fence.token, prefix, ...(options.token === undefined ? {} : { token: options.token }) })
    )
    const queue = yield* provide(ClusterQueue.make({
      handlers,
      member: name,
      prefix,
      ...(options.hop === false ? {} : { forward: hop.send }),
      ...(options.localRuns === false ? { localRuns: false } : {}),
      lanes: withTurnTimeouts(
        options.lanes as Record<string, LaneLimits> | undefined,
        options.turnTimeoutMs ?? DEFAULT_TURN_TIMEOUT_MS
      ),
      ...(options.sweepMs === undefined ? {} : { sweepMs: options.sweepMs }),
      ...(options.sweepAgeMs === undefined ? {} : { sweepAgeMs: options.sweepAgeMs }),
      drainTimeoutMs
    }))
    if (jobs.length > 0) yield* provide(Layer.build(ClusterCronJobs.layer(jobs, queue, { prefix })))
    if (options.heartbeatMs !== undefined) {
      yield* provide(Layer.build(ClusterHeartbeat.layer({ everyMs: options.heartbeatMs }, queue)))
    }
    yield* provide(
      Retention.start({ outbox, prefix, ...(options.retainMs === undefined ? {} : { retainMs: options.retainMs }) })
    )
    const inbox = yield* provide(Inbox.make(prefix))
    // The message path's statements warmed on the connections the first messages will use, before the
    // ingress listens (Warmup.ts): a message's slot statement as the ingress runs it, a turn's start and its
    // fenced commit, on a session of each connection's own, rolled back.
    const historyRows = ClusterAgent.DEFAULT_HISTORY_LIMIT * 2
    const slots = yield* provide(Coalesce.make(prefix))
    const turnStatements = ClusterAgent.warmStatements({ outbox, member: name, prefix, channel: channel.name })
    const warmed = yield* provide(Warmup.warm({
      connections: warmConnections,
      statements: (round, connection) => {
        const session = `\u0001warmup:${name}:${connection}:${round}`
        return Effect.andThen(
          slots.slot("main", session, {
            session,
            messageId: "warmup",
            text: "warm-up",
            shard: `warmup:${name}`,
            generation: 0,
            history: historyRows
          }),
          turnStatements(round, connection)
        )
      }
    }))
    if (warmed.failures > 0) {
      yield* Effect.logWarning(
        `warm-up: ${warmed.failures} of ${warmed.connections} Postgres connections failed a statement (the first messages may be slower): ${warmed.firstFailure}`
      )
    }
    const ingress = yield* Ingress.serve({
      queue,
      delivery,
      outbox,
      inbox,
      relay: queue.runNow,
      // The agent's history (its default limit, two rows a turn): an idle session's turn gets it from the slot.
      historyRows,
      port: options.port,
      ...(options.host === undefined ? {} : { host: options.host }),
      ...(options.token === undefined ? {} : { token: options.token })
    })

    const host = options.host ?? "127.0.0.1"
    yield* provide(hop.register(`http://${host.includes(":") ? `[${host}]` : host}:${options.port}`))

    let stopped: Deferred.Deferred<DrainReport> | undefined
    const stop: Effect.Effect<DrainReport> = Effect.suspend(() => {
      if (stopped !== undefined) return Deferred.await(stopped)
      const done = Deferred.makeUnsafe<DrainReport>()
      stopped = done
      deadline = Date.now() + drainTimeoutMs
      return Effect.gen(function*() {
        yield* ingress.stopAccepting
        // Waiting clients are answered as their runs end; at the deadline the rest get 202 `pending`.
        const report = yield* queue.drain({ timeoutMs: left(), keepRuns: true })
        yield* ingress.close(Math.min(500, left()))
        return report
      }).pipe(Effect.tap((report) => Deferred.succeed(done, report)))
    })
    // The first finalizer to run: closing the Scope without `stop` shuts down the same way.
    yield* Effect.addFinalizer(() => Effect.asVoid(stop))
    return { name, warmed, queue, delivery, outbox, stop }
  })

/** The Postgres client type the runner uses, re-exported for callers that build their own. */
export type { PgClient }
