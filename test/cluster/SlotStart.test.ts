/**
 * A message to an idle session is started by its slot statement (SlotStartSql.ts): the run carries its
 * messages and the session's history to its turn (`ClusterTask.prefetched`), on its first send only.
 * One in-process runner, real Postgres and sockets.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Deferred, Effect, Schedule } from "effect"
import { EntityId, Sharding } from "effect/cluster"
import { afterAll, beforeAll } from "vitest"
import * as ClusterQueue from "../../src/cluster/ClusterQueue.js"
import type { ClusterTask } from "../../src/cluster/ClusterQueue.js"
import { Fence } from "../../src/cluster/Fencing.js"
import { KeyEntity } from "../../src/cluster/protocol.js"
import { freshDatabase, postgresAvailable, query } from "./pg.js"
import { freePort, runnerContext } from "./support.js"

const up = await postgresAvailable("test/cluster/SlotStart.test.ts")

describe.skipIf(!up)("a message to an idle session starts with its slot statement (Postgres)", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  let port = 0
  beforeAll(async () => {
    db = await freshDatabase("slotstart")
    port = await freePort()
  }, 30_000)
  afterAll(async () => {
    await db?.drop()
  })

  it.live(
    "an idle session's run carries its message and history to the handler and its slot is started at dispatch; a message while the session's run is unanswered joins a slot that waits and carries nothing; a send again of a run (replay) carries nothing to the handler",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const seen = new Map<string, ClusterTask["prefetched"] | "absent">()
        const release = Deferred.makeUnsafe<void>()
        const handler = (task: ClusterTask) =>
          Effect.gen(function*() {
            seen.set(task.runId, task.prefetched ?? "absent")
            if ((task.command as { block?: boolean }).block === true) yield* Deferred.await(release)
            return task.runId
          })
        const ctx = yield* runnerContext(db!.url, port)
        // The runner holds the key's shard (its epoch is known) before the first message: a run that arrives
        // before that is not started here and waits for the replay that follows the shard's acquisition, so
        // its turn would read what is stored instead of what the statement carried (seen under load).
        const entity = EntityId.make("main/idle")
        const shardId = Context.get(ctx, Sharding.Sharding).getShardId(entity, KeyEntity.getShardGroup(entity))
        yield* Effect.sync(() => Context.get(ctx, Fence).epochOf(`${shardId.group}:${shardId.id}`)).pipe(
          Effect.repeat({ until: (epoch) => epoch !== undefined, schedule: Schedule.spaced("20 millis") }),
          Effect.timeout("20 seconds")
        )
        const q = yield* ClusterQueue.make({
          handlers: { main: handler, cron: handler, heartbeat: handler },
          lanes: { main: { concurrent: 2, queued: 8 } },
          member: "slot-start",
          drainTimeoutMs: 2_000
        }).pipe(Effect.provideContext(ctx))
        const send = (text: string, block = false) =>
          q.dispatch("main", "idle", { text, block }, {
            coalesce: true,
            inbox: { session: "idle", text, history: 4 }
          })
        const slotRow = Effect.promise(() =>
          query<{ slot: number; started: boolean }>(
            db!.url,
            `SELECT slot::float8 AS slot, started FROM switchyard_coalesce WHERE lane = 'main' AND key = 'idle'`
          )
        )

        // Idle: started by the statement (before the handler runs), the message and the (empty) history with it.
        const first = yield* send("one", true)
        assert.deepStrictEqual(yield* slotRow, [{ slot: 1, started: true }])
        // While it is unanswered: the next slot waits, and a second message joins it.
        const second = yield* send("two")
        const third = yield* send("three")
        assert.deepStrictEqual([second.admission, third.admission, third.runId], ["queued", "coalesced", second.runId])
        assert.deepStrictEqual(yield* slotRow, [{ slot: 2, started: false }])
        yield* Deferred.succeed(release, undefined)
        assert.deepStrictEqual(yield* Effect.all([first.await, second.await, third.await]), [
          first.runId,
          second.runId,
          second.runId
        ])
        assert.deepStrictEqual(seen.get(first.runId), { texts: ["one"], history: [], rows: 4 })
        assert.strictEqual(seen.get(second.runId), "absent")

        // Idle again (both answered): the next run is started by its statement.
        const fourth = yield* send("four")
        assert.strictEqual(yield* fourth.await, fourth.runId)
        assert.deepStrictEqual(seen.get(fourth.runId), { texts: ["four"], history: [], rows: 4 })

        // A send again of a run (its first send lost, say) does not pass what the first send carried.
        const [{ shard }] = yield* Effect.promise(() =>
          query<{ shard: string }>(db!.url, `SELECT shard FROM switchyard_inbox WHERE session = 'idle' LIMIT 1`)
        )
        const [{ run_id: lostRun }] = yield* Effect.promise(() =>
          query<{ run_id: string }>(
            db!.url,
            `SELECT out_run_id AS run_id FROM switchyard_coalesce_slot_start('main', 'idle', 'idle', NULL, 'five', $1, $2, 0, 4)`,
            [Date.now(), shard]
          )
        )
        const client = (yield* KeyEntity.client.pipe(Effect.provideContext(ctx)))("main/idle")
        const again = yield* client.RunNow({
          runId: lostRun,
          lane: "main",
          key: "idle",
          generation: 0,
          command: { text: "five" },
          admittedAt: Date.now(),
          replay: "dispatcher",
          prefetched: { texts: ["five"], history: [], rows: 4 },
          startedRaw: { texts: ["five"], history: "[]", rows: 4 }
        })
        assert.strictEqual(again, lostRun)
        assert.strictEqual(seen.get(lostRun), "absent")

        // A first send from a runner of the version before (its history parsed, `prefetched`) is still used;
        // this version's (`startedRaw`: the slot statement's JSON text) is parsed where the turn runs, and
        // one whose text is not the statement's shape carries nothing (the turn reads what is stored).
        const startedRun = (text: string) =>
          Effect.promise(() =>
            query<{ run_id: string }>(
              db!.url,
              `SELECT out_run_id AS run_id FROM switchyard_coalesce_slot_start('main', 'idle', 'idle', NULL, $3, $1, $2, 0, 4)`,
              [Date.now(), shard, text]
            )
          ).pipe(Effect.map(([row]) => row.run_id))
        const sendFirst = (runId: string, extra: object) =>
          client.RunNow({
            runId,
            lane: "main",
            key: "idle",
            generation: 0,
            command: { text: runId },
            admittedAt: Date.now(),
            ...extra
          })
        const older = yield* startedRun("six")
        const history = [{ role: "user" as const, content: "hi" }, { role: "assistant" as const, content: "hello" }]
        yield* sendFirst(older, { prefetched: { texts: ["six"], history, rows: 4 } })
        assert.deepStrictEqual(seen.get(older), { texts: ["six"], history, rows: 4 })
        const raw = yield* startedRun("seven")
        yield* sendFirst(raw, {
          startedRaw: { texts: ["seven"], history: `[["user","hi"],["assistant","hello"]]`, rows: 4 }
        })
        assert.deepStrictEqual(seen.get(raw), { texts: ["seven"], history, rows: 4 })
        const bad = yield* startedRun("eight")
        yield* sendFirst(bad, { startedRaw: { texts: ["eight"], history: `[["system","hi"]]`, rows: 4 } })
        assert.strictEqual(seen.get(bad), "absent")
      })),
    60_000
  )
})
