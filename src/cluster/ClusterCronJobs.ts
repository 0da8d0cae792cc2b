/**
 * Cron jobs once per due time across the cluster, on effect/cluster's `ClusterCron`: each due time is
 * one persisted message to one entity, so one runner fires it (again only when the firing is caught
 * in a shard move or a crash). Firing dispatches a run on lane `cron`, keyed by the job, coalescing
 * across processes: a due time that comes while the job's previous run still waits adds nothing,
 * so an overrunning job never piles up nor overlaps itself.
 * Every firing is recorded in `<prefix>_cron_firings` (job, due time, runner, count).
 */
import { PgClient } from "@effect/sql-pg"
import { DateTime, Effect, Layer } from "effect"
import { ClusterCron } from "effect/cluster"
import type { Sharding } from "effect/cluster"
import type { ParsedCronJob } from "../agent/CronJobs.js"
import type { ClusterQueue } from "./ClusterQueue.js"

/** Registers every job with the cluster for the layer's lifetime. */
export const layer = (
  jobs: ReadonlyArray<ParsedCronJob>,
  queue: ClusterQueue,
  options: { readonly prefix?: string } = {}
): Layer.Layer<never, never, Sharding.Sharding | PgClient.PgClient> => {
  const prefix = options.prefix ?? "switchyard"
  const layers = jobs.map((job) =>
    ClusterCron.make({
      name: `switchyard-${job.name}`,
      cron: job.cron,
      // Each next due time is computed from the previous one, so a slow firing or a moving shard makes
      // a run late, never skipped; one missed by more than a minute (no runner alive) is skipped.
      calculateNextRunFromPrevious: true,
      skipIfOlderThan: "1 minute",
      execute: Effect.gen(function*() {
        const sql = yield* PgClient.PgClient
        const due = DateTime.toEpochMillis(yield* ClusterCron.CurrentScheduledTime)
        yield* sql.unsafe(
          `INSERT INTO ${prefix}_cron_firings (job, due_at, runner) VALUES ($1, $2, $3)
             ON CONFLICT (job, due_at) DO UPDATE SET fired = ${prefix}_cron_firings.fired + 1`,
          [job.name, due, queue.member]
        )
        yield* queue.dispatch("cron", job.name, {
          type: "cron",
          job: job.name,
          prompt: job.prompt,
          ...(job.to === undefined ? {} : { to: job.to }),
          dueAt: due
        }, { coalesce: true }).pipe(
          Effect.catch((e) => Effect.logWarning(`Cron job ${job.name} not dispatched: ${e.message}`))
        )
      }).pipe(Effect.orDie)
    })
  )
  return layers.reduce<Layer.Layer<never, never, Sharding.Sharding | PgClient.PgClient>>(
    (all, one) => Layer.merge(all, one),
    Layer.empty
  )
}
