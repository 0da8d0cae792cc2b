/**
 * What a runner reports about itself: `GET /status` (JSON) and `GET /metrics` (Prometheus text
 * exposition format 0.0.4, every family with its `# HELP` and `# TYPE`).
 */
import { Effect, Metric } from "effect"
import { ClusterMetrics } from "effect/cluster"
import type { ClusterDelivery } from "./ClusterDelivery.js"
import type { ClusterQueue } from "./ClusterQueue.js"
import type { PgDeliveryLog } from "./PgDeliveryLog.js"

/** What `status` reads. */
export interface StatusSources {
  readonly queue: ClusterQueue
  readonly delivery: ClusterDelivery
  readonly outbox: PgDeliveryLog
}

/** What `/status` returns. */
export const status = (options: StatusSources) =>
  Effect.gen(function*() {
    const lanes = yield* options.queue.snapshot
    const members = yield* options.queue.members
    const counters = yield* options.queue.counters
    const delivery = yield* options.delivery.stats
    const outbox = yield* options.outbox.stats
    const gauge = (m: Metric.Metric<bigint, { readonly value: bigint }>) =>
      Effect.map(Metric.value(m), (s) => Number(s.value))
    return {
      runner: options.queue.member,
      // effect/cluster's own view of this runner: shards it holds, entities resident here.
      cluster: {
        shards: yield* gauge(ClusterMetrics.shards),
        entities: yield* gauge(ClusterMetrics.entities),
        singletons: yield* gauge(ClusterMetrics.singletons)
      },
      lanes,
      members,
      counters,
      delivery: { ...delivery, pending: outbox.pending, dead: outbox.dead }
    }
  })

/** The value `status` succeeds with. */
export type Status = Effect.Success<ReturnType<typeof status>>

interface Family {
  readonly name: string
  readonly type: "counter" | "gauge"
  readonly help: string
  readonly samples: ReadonlyArray<{ readonly labels: Readonly<Record<string, string>>; readonly value: number }>
}

/** A label value as the text format wants it: backslash, double quote and line feed escaped. */
const labelValue = (v: string): string => v.replace(/\\/g, "\\\\").replace(/"/g, "\\\"").replace(/\n/g, "\\n")

const render = (families: ReadonlyArray<Family>): string => {
  const lines: Array<string> = []
  for (const f of families) {
    lines.push(`# HELP ${f.name} ${f.help}`, `# TYPE ${f.name} ${f.type}`)
    for (const s of f.samples) {
      const labels = Object.entries(s.labels).map(([k, v]) => `${k}="${labelValue(v)}"`).join(",")
      lines.push(`${f.name}{${labels}} ${Number.isFinite(s.value) ? s.value : 0}`)
    }
  }
  return lines.join("\n") + "\n"
}

/** `status` as Prometheus text. */
export const metricsText = (s: Status): string => {
  const runner = { runner: s.runner }
  const one = (name: string, type: Family["type"], help: string, value: number | undefined): Family => ({
    name,
    type,
    help,
    samples: [{ labels: runner, value: value ?? 0 }]
  })
  const perLane = (name: string, help: string, pick: (l: Status["lanes"][number]) => number): Family => ({
    name,
    type: "gauge",
    help,
    samples: s.lanes.map((l) => ({ labels: { ...runner, lane: l.lane }, value: pick(l) }))
  })
  const c = s.counters
  return render([
    one(
      "switchyard_cluster_dispatched_total",
      "counter",
      "Runs this runner dispatched into the cluster.",
      c.dispatched
    ),
    one("switchyard_cluster_succeeded_total", "counter", "Dispatched runs that succeeded.", c.succeeded),
    one("switchyard_cluster_failed_total", "counter", "Dispatched runs whose handler failed.", c.failed),
    one(
      "switchyard_cluster_queue_failures_total",
      "counter",
      "Dispatched runs that failed with a QueueFailure (canceled, timeout, stale, closed).",
      c.queueFailures
    ),
    one("switchyard_cluster_defects_total", "counter", "Dispatched runs whose handler died.", c.defects),
    one("switchyard_cluster_outstanding", "gauge", "Dispatched runs not answered yet.", c.outstanding),
    one(
      "switchyard_cluster_replay_sweeps_total",
      "counter",
      "Sweeps of the unanswered inbox of this runner's shards (volatile runs whose send was lost).",
      c.replaySweeps
    ),
    one(
      "switchyard_cluster_replayed_total",
      "counter",
      "Unanswered inbox runs this runner sent to their keys (at a shard's acquisition or by a sweep).",
      c.replayed
    ),
    perLane("switchyard_lane_running", "Tasks running on this runner, per lane.", (l) => l.running),
    perLane("switchyard_lane_waiting", "Tasks admitted on this runner and waiting, per lane.", (l) => l.waiting),
    perLane("switchyard_lane_generation", "The lane's cluster generation (restartLane bumps it).", (l) => l.generation),
    one(
      "switchyard_cluster_members",
      "gauge",
      "Live runners of the cluster, as this runner sees them.",
      s.members.length
    ),
    one("switchyard_cluster_shards", "gauge", "Shards this runner holds.", s.cluster.shards),
    one("switchyard_cluster_entities", "gauge", "Keys (entities) resident on this runner.", s.cluster.entities),
    one("switchyard_cluster_singletons", "gauge", "Cluster singletons running on this runner.", s.cluster.singletons),
    one("switchyard_delivery_in_flight", "gauge", "Delivery attempts running on this runner.", s.delivery.inFlight),
    one(
      "switchyard_delivery_delivered_total",
      "counter",
      "Outbox entries this runner delivered.",
      s.delivery.delivered
    ),
    one(
      "switchyard_delivery_failed_attempts_total",
      "counter",
      "Delivery attempts of this runner that failed and will be retried.",
      s.delivery.failedAttempts
    ),
    one(
      "switchyard_delivery_dead_lettered_total",
      "counter",
      "Outbox entries this runner moved to the dead letters.",
      s.delivery.deadLettered
    ),
    one(
      "switchyard_delivery_pending",
      "gauge",
      "Outbox entries not delivered yet (whole cluster).",
      s.delivery.pending
    ),
    one("switchyard_delivery_dead", "gauge", "Dead-lettered outbox entries (whole cluster).", s.delivery.dead)
  ])
}
