/**
 * A cron due time starts once: effect/cluster fires a due time again when the shard of its job moved,
 * or its runner died, before the firing's reply was saved (at least once); `ClusterCronJobs.fire`
 * makes that replay start nothing, after the first firing's run ended and while it runs.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { parseJobs } from "../../src/agent/CronJobs.js"
import * as ClusterCronJobs from "../../src/cluster/ClusterCronJobs.js"
import * as Postgres from "../../src/cluster/Postgres.js"
import * as Runner from "../../src/cluster/Runner.js"
import { postgresAvailable, useFreshDatabase } from "./pg.js"
import { freePort } from "./support.js"

const up = await postgresAvailable("test/cluster/ClusterCron.test.ts")

describe.skipIf(!up)("cron once per due time (Postgres)", () => {
  const db = useFreshDatabase("cron")

  it.live(
    "a replayed firing of a due time dispatches nothing: not after the first firing's run ended (no second run, the slot stays), not when two firings of one due time race (one run); each replay is counted in `fired`",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const runner = yield* Runner.start({
          postgres: db.url,
          port: yield* Effect.promise(freePort),
          clusterPort: yield* Effect.promise(freePort),
          latencyMs: 0,
          shardsPerGroup: 8,
          name: "cron-runner"
        })
        const [job] = yield* parseJobs([{ name: "tick", schedule: "* * * * * *", prompt: "tick" }])
        const query = <A extends object>(text: string, params: ReadonlyArray<unknown> = []) =>
          Postgres.withClient(db.url, (sql) => sql.unsafe<A>(text, params))
        const fire = (due: number) =>
          ClusterCronJobs.fire(job, due, runner.queue).pipe(Effect.provide(Postgres.layer(db.url)))
        const turnsOf = (runId: string) =>
          Effect.map(
            query<{ n: number }>(`SELECT count(*)::float8 AS n FROM switchyard_turns WHERE run_id = $1`, [runId]),
            (rows) => Number(rows[0].n)
          )
        const firings = query<{ due: number; fired: number; run_id: string; runner: string }>(
          `SELECT due_at::float8 AS due, fired, run_id, runner FROM switchyard_cron_firings ORDER BY due_at`
        )
        const slot = Effect.map(
          query<{ slot: number }>(`SELECT slot::float8 AS slot FROM switchyard_coalesce WHERE lane = 'cron'`),
          (rows) => rows.map((r) => Number(r.slot))
        )

        const run1 = "coalesce:cron:tick:1"
        const first = yield* fire(1_000)
        assert.deepStrictEqual(first, { _tag: "Dispatched", runId: run1 })
        for (let polls = 0; (yield* turnsOf(run1)) === 0; polls++) {
          if (polls === 500) assert.fail("the cron run never ran (10 s)")
          yield* Effect.sleep("20 millis")
        }
        // The replay after the run ended (a crash or shard move caught the firing before its reply).
        const replay = yield* fire(1_000)
        assert.deepStrictEqual(replay, { _tag: "Replayed", runId: run1, runner: "cron-runner" })
        assert.deepStrictEqual(yield* slot, [1])

        // Two firings of the next due time at once (the old owner still firing while the new one replays).
        const both = yield* Effect.all([fire(2_000), fire(2_000)], { concurrency: 2 })
        assert.deepStrictEqual(both.map((f) => f._tag).sort(), ["Dispatched", "Replayed"])
        assert.strictEqual(both[0].runId, both[1].runId)
        assert.deepStrictEqual(yield* slot, [2])
        assert.deepStrictEqual(yield* firings, [
          { due: 1_000, fired: 2, run_id: "coalesce:cron:tick:1", runner: "cron-runner" },
          { due: 2_000, fired: 2, run_id: "coalesce:cron:tick:2", runner: "cron-runner" }
        ])
        assert.strictEqual(yield* turnsOf(run1), 1)
      })),
    60_000
  )
})
