/**
 * Cron jobs once per due time across the cluster, on effect/cluster's `ClusterCron`: each due time is
 * one persisted message to one entity, so one runner fires it (again only when the firing is caught
 * in a shard move or a crash). Firing dispatches a run on lane `cron`, keyed by the job, coalescing
 * across processes: a due time that comes while the job's previous run still waits adds nothing,
 * so an overrunning job never piles up nor overlaps itself.
 * Every due time is recorded in `<prefix>_cron_firings` (job, due time, runner, run id, times fired),
 * and only its first firing dispatches (see {@link fire}).
 */
import { PgClient } from "@effect/sql-pg"
import { DateTime, Effect, Layer } from "effect"
import { ClusterCron } from "effect/cluster"
import type { Sharding } from "effect/cluster"
import type { ParsedCronJob } from "../agent/CronJobs.js"
import type { AdmissionError, RequestError } from "../queue/errors.js"
import type { ClusterQueue } from "./ClusterQueue.js"

/** What one firing of a due time did. */
export type Firing =
  /** The first firing of the due time: it dispatched (or joined, coalescing) run `runId`. */
  | { readonly _tag: "Dispatched"; readonly runId: string }
  /** A replay of a due time fired before (a shard move or a crash caught that firing): it started nothing. */
  | { readonly _tag: "Replayed"; readonly runId: string | undefined; readonly runner: string | undefined }

/** Thrown inside the slot's transaction to roll it back: the due time has a firing already. */
class AlreadyFired {
  readonly _tag = "AlreadyFired"
}

/**
 * Fires `job`'s due time `due` (epoch ms) once: the firing's row (job, due time, runner, run id) is
 * written in the transaction of the run's coalescing slot, so the run exists exactly when the row
 * does. A replay of the same due time (effect/cluster runs a firing again when the shard of its job
 * moved, or the runner died, before the firing's reply was saved) finds the row, counts itself in
 * `fired` and dispatches nothing: the first firing's run is sent, or joined and sent by the next
 * coalescing dispatch of the job (Coalesce.ts), so the due time is never lost either.
 */
export const fire = (
  job: ParsedCronJob,
  due: number,
  queue: ClusterQueue,
  prefix = "switchyard"
): Effect.Effect<Firing, AdmissionError | RequestError, PgClient.PgClient> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const command = {
      type: "cron",
      job: job.name,
      prompt: job.prompt,
      ...(job.to === undefined ? {} : { to: job.to }),
      dueAt: due
    }
    const dispatched = yield* queue.dispatch("cron", job.name, command, {
      coalesce: true,
      beforeSend: (runId) =>
        Effect.flatMap(
          sql.unsafe<{ readonly n: number }>(
            `INSERT INTO ${prefix}_cron_firings (job, due_at, runner, run_id) VALUES ($1, $2, $3, $4)
             ON CONFLICT (job, due_at) DO NOTHING RETURNING 1 AS n`,
            [job.name, due, queue.member, runId]
          ),
          (rows) => rows.length === 1 ? Effect.void : Effect.die(new AlreadyFired())
        )
    }).pipe(
      Effect.map((future): Firing => ({ _tag: "Dispatched", runId: future.runId })),
      Effect.catchDefect((defect) =>
        defect instanceof AlreadyFired
          ? Effect.map(
            sql.unsafe<{ readonly run_id: string | null; readonly runner: string }>(
              `UPDATE ${prefix}_cron_firings SET fired = fired + 1 WHERE job = $1 AND due_at = $2
               RETURNING run_id, runner`,
              [job.name, due]
            ),
            (rows): Firing => ({ _tag: "Replayed", runId: rows[0]?.run_id ?? undefined, runner: rows[0]?.runner })
          )
          : Effect.die(defect)
      )
    )
    return dispatched
  }).pipe(Effect.catchTag("SqlError", (e) => Effect.die(e)))

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
        const due = DateTime.toEpochMillis(yield* ClusterCron.CurrentScheduledTime)
        const firing = yield* fire(job, due, queue, prefix).pipe(
          Effect.catch((e) =>
            Effect.as(Effect.logWarning(`Cron job ${job.name} not dispatched: ${e.message}`), undefined)
          )
        )
        if (firing?._tag === "Replayed") {
          yield* Effect.logInfo(
            `cron: ${job.name} due ${new Date(due).toISOString()} was fired before${
              firing.runner === undefined ? "" : ` by ${firing.runner}`
            } (run ${firing.runId ?? "?"}); this replay starts nothing`
          )
        }
      }).pipe(Effect.orDie)
    })
  )
  return layers.reduce<Layer.Layer<never, never, Sharding.Sharding | PgClient.PgClient>>(
    (all, one) => Layer.merge(all, one),
    Layer.empty
  )
}
