/**
 * Fencing with real signals: two runner processes (lease 3 s), a turn of session S starts on one of
 * them, which is then SIGSTOPped past its lease while the turn waits for the model. The other runner
 * takes its shards (bumping their epochs), runs the stalled turn's message again and answers a second
 * one. On SIGCONT the stale runner's turn reaches its commit, finds a newer epoch and writes nothing:
 * no overlapping turns of S in `switchyard_turns`, one outbox entry (one reply) per message, the stale
 * runner logs that it was fenced, and it goes on answering. On the same two runners: cancel sent to
 * the runner that does not run the turn, and one heartbeat per cluster (a singleton that moves to the
 * survivor when its runner is SIGKILLed).
 */
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as ScriptedModel from "../../src/agent/ScriptedModel.js"
import * as ClusterAgent from "../../src/cluster/ClusterAgent.js"
import * as Migrations from "../../src/cluster/Migrations.js"
import * as PgDeliveryLog from "../../src/cluster/PgDeliveryLog.js"
import * as Postgres from "../../src/cluster/Postgres.js"
import { freshDatabase, postgresAvailable, query } from "./pg.js"
import { postMessage, runningOn, shardsSettled, startRunner, status, tearDown, until } from "./support.js"
import type { RunnerProcess } from "./support.js"

const up = await postgresAvailable("test/cluster/Fencing.test.ts")
const LATENCY_MS = 1_500
const LEASE_MS = 3_000
const SHARDS = 8

/** The shard (1-based) of entity `main/<session>`: effect/cluster's routing (its internal `hashString`). */
const shardOf = (session: string): number => {
  const id = `main/${session}`
  let h = 5381
  for (let i = id.length; i > 0;) h = (h * 33) ^ id.charCodeAt(--i)
  h = (h & 0xbfffffff) | ((h >>> 1) & 0x40000000)
  return Math.abs(h % SHARDS) + 1
}

/** Whether the heartbeat singleton runs on `r` now, by its log: its last heartbeat line says it started. */
const runsHeartbeat = (r: RunnerProcess): boolean => {
  const lines = r.log.join("").split("\n").filter((l) => l.includes("heartbeat: the cluster's heartbeat"))
  return lines.length > 0 && lines[lines.length - 1].includes("heartbeat runs on")
}

describe.skipIf(!up)(
  "two runner processes: fencing (SIGSTOP past the lease), cancel across runners, one heartbeat per cluster",
  () => {
    let db: { url: string; drop: () => Promise<void> } | undefined
    const runners: Array<RunnerProcess> = []
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-fence-"))
    const outbox = path.join(dir, "outbox.jsonl")

    beforeAll(async () => {
      db = await freshDatabase("fencing")
      const args = [
        "--latency",
        String(LATENCY_MS),
        "--lease",
        String(LEASE_MS),
        "--shards",
        String(SHARDS),
        "--drain-timeout",
        "2000",
        "--delivery-timeout",
        "1000",
        "--heartbeat",
        "500"
      ]
      runners.push(
        ...await Promise.all([startRunner({ url: db.url, outbox, args }), startRunner({ url: db.url, outbox, args })])
      )
      await shardsSettled(runners.map((r) => r.port), SHARDS)
    }, 90_000)

    afterAll(async () => {
      await tearDown(runners, db, dir)
    }, 60_000)

    it(
      "a runner stalled mid-turn past its lease is fenced on waking: no overlapping turns, no second reply, it logs `fenced` and goes on",
      async () => {
        const session = "fenced-session"
        // The first message goes to the runner that does not hold the session's shard: it hops to the shard's
        // holder, and while that one is stopped its dispatcher sends the run again through effect/cluster, to
        // the key's entity there (a `RunNow` the stalled runner leaves unanswered when it is fenced). Its holder
        // is found by a session of the same shard.
        const sameShard = Array.from({ length: 1_000 }, (_, i) => `shard-probe-${i}`).find((s) =>
          shardOf(s) === shardOf(session)
        )!
        const probe = await postMessage(runners[0].port, sameShard, "who holds this shard?", 30_000)
        expect(probe.status).toBe(200)
        const holder = runners.find((r) => r.name === probe.body.reply?.turnRunner)!
        const first = await postMessage(runners.find((r) => r !== holder)!.port, session, "first", 0)
        expect(first.status).toBe(202)
        // The runner whose lane runs the turn now (its model call takes LATENCY_MS).
        const stale: RunnerProcess | undefined = await runningOn(runners)
        expect(stale).toBe(holder)
        const owner = runners.find((r) => r !== stale)!
        stale!.child.kill("SIGSTOP")
        const stoppedAt = Date.now()
        try {
          // Past the lease: the other runner holds every shard, epochs bumped.
          await until(
            "the live runner to take every shard",
            30_000,
            async () => (await status(owner.port)).cluster.shards === SHARDS
          )
          // Not before the lease ran out: it runs from the stalled runner's last refresh, which came up to one
          // refresh interval (a third of the lease, ClusterLayer.ts) before the SIGSTOP.
          expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(LEASE_MS - LEASE_MS / 3 - 100)
          const second = await postMessage(owner.port, session, "second", 30_000)
          expect([second.status, second.body.reply?.turnRunner]).toEqual([200, owner.name])
          // The first message too was answered by the new owner (replayed from the cluster's message table).
          await until("the first message's turn on the new owner", 20_000, async () =>
            (await query<{ n: number }>(
              db!.url,
              `SELECT count(*)::float8 AS n FROM switchyard_turns WHERE session = $1`,
              [session]
            ))[0].n >= 2)
        } finally {
          stale!.child.kill("SIGCONT")
        }
        await until(
          "the stale runner to log that its turn was fenced",
          20_000,
          async () => stale!.log.join("").includes(`fenced: run ${first.body.runId}`)
        ).catch((e) => {
          fs.writeFileSync("/tmp/fence-stale.log", stale!.log.join(""))
          throw e
        })
        expect(stale!.alive).toBe(true)

        const turns = await query<{ runner: string; run_id: string; started_at: number; ended_at: number }>(
          db!.url,
          `SELECT runner, run_id, started_at::float8 AS started_at, ended_at::float8 AS ended_at FROM switchyard_turns WHERE session = $1 ORDER BY started_at`,
          [session]
        )
        expect(turns.map((t) => t.runner)).toEqual([owner.name, owner.name])
        expect(
          new Set(turns.map((t) => t.run_id)).size
        ).toBe(2)
        for (let i = 1; i < turns.length; i++) {
          expect(Number(turns[i].started_at)).toBeGreaterThanOrEqual(Number(turns[i - 1].ended_at))
        }
        const replies = await query<{ key: string; n: number }>(
          db!.url,
          `SELECT idempotency_key AS key, count(*)::float8 AS n FROM switchyard_outbox WHERE recipient = $1 GROUP BY 1`,
          [session]
        )
        expect(replies.map((r) => Number(r.n))).toEqual([1, 1])
        expect(replies.map((r) => r.key)).toContain(`reply:${first.body.runId}`)
        const transcript = await query<{ role: string; content: string }>(
          db!.url,
          `SELECT role, content FROM switchyard_transcripts WHERE session = $1 ORDER BY id`,
          [session]
        )
        expect(transcript.map((t) => t.content)).toEqual(["first", "You said: first", "second", "You said: second"])

        // It goes on: back in the cluster, it takes shards again and answers through its own ingress. Within a
        // few seconds (~1 s here): the handoff does not wait for the run it left unanswered (protocol.ts, `RunNow`
        // is interrupted when its entity stops; without that, 15 s of effect/cluster's termination timeout and
        // up to 5 s of its acquisition poll).
        await shardsSettled(runners.map((r) => r.port), SHARDS, 8_000)
        const again = await postMessage(stale!.port, "after-the-stall", "hello", 30_000)
        expect([again.status, again.body.reply?.text]).toEqual([200, "You said: hello"])
        const epochs = await query<{ n: number }>(
          db!.url,
          `SELECT count(*)::float8 AS n FROM switchyard_shard_epochs WHERE epoch > 1`
        )
        expect(Number(epochs[0].n)).toBeGreaterThan(0)
      },
      120_000
    )

    it(
      "cancel sent to the runner that does not run the turn: the turn is interrupted where it runs, its client gets 502 canceled, no turn record, the session goes on",
      async () => {
        const session = "cancel-me"
        const waiting = postMessage(runners[0].port, session, "long", 30_000)
        const running = await runningOn(runners)
        const other = runners.find((r) => r !== running)!
        const canceled = await fetch(`http://127.0.0.1:${other.port}/sessions/${session}/cancel`, { method: "POST" })
        expect([canceled.status, await canceled.json()]).toEqual([200, { session, canceled: true }])
        const answer = await waiting
        expect([answer.status, answer.body.reason]).toEqual([502, "canceled"])
        expect((await status(running!.port)).lanes.find((l) => l.lane === "main")?.running).toBe(0)
        const turns = await query<{ n: number }>(
          db!.url,
          `SELECT count(*)::float8 AS n FROM switchyard_turns WHERE session = $1`,
          [session]
        )
        expect(Number(turns[0].n)).toBe(0)
        const next = await postMessage(other.port, session, "again", 30_000)
        expect([next.status, next.body.reply?.text]).toEqual([200, "You said: again"])
      },
      60_000
    )

    it(
      "messages that arrive while a session's turn runs, through either runner, are answered together by the next turn (the inbox): one run, one reply, one turn",
      async () => {
        const session = "together"
        const first = postMessage(runners[0].port, session, "m1", 30_000)
        await runningOn(runners)
        // m1's turn has read its messages (it marks its coalescing slot started as it reads them): later
        // messages take the next run.
        await until("m1's turn to read its messages", 20_000, async () =>
          (await query<{ started: boolean }>(
            db!.url,
            `SELECT started FROM switchyard_coalesce WHERE lane = 'main' AND key = $1 AND slot = 1`,
            [session]
          ))[0]?.started === true)
        const [second, third] = await Promise.all([
          postMessage(runners[0].port, session, "m2", 30_000),
          postMessage(runners[1].port, session, "m3", 30_000)
        ])
        expect((await first).body.reply?.text).toBe("You said: m1")
        expect([second.status, third.status]).toEqual([200, 200])
        expect(second.body.runId).toBe(third.body.runId)
        expect(second.body.reply?.text === "You said: m2 / m3" || second.body.reply?.text === "You said: m3 / m2").toBe(
          true
        )
        expect(third.body.reply).toEqual(second.body.reply)
        const turns = await query<{ n: number }>(
          db!.url,
          `SELECT count(*)::float8 AS n FROM switchyard_turns WHERE session = $1`,
          [session]
        )
        expect(Number(turns[0].n)).toBe(2)
        const replies = await query<{ body: string }>(
          db!.url,
          `SELECT body FROM switchyard_outbox WHERE recipient = $1 ORDER BY seq`,
          [session]
        )
        expect(replies.map((r) => JSON.parse(r.body).messages)).toEqual([1, 2])
        const transcript = await query<{ role: string }>(
          db!.url,
          `SELECT role FROM switchyard_transcripts WHERE session = $1 ORDER BY id`,
          [session]
        )
        expect(transcript.map((t) => t.role)).toEqual(["user", "assistant", "user", "user", "assistant"])
      },
      60_000
    )

    it(
      "one heartbeat per cluster: the singleton runs on exactly one runner; after a SIGKILL of that runner it runs on the survivor",
      async () => {
        await until(
          "the heartbeat singleton to run on one runner",
          20_000,
          async () => runners.filter(runsHeartbeat).length === 1
        )
        await shardsSettled(
          runners.map((r) => r.port),
          SHARDS
        )
        expect(runners.filter(runsHeartbeat).length).toBe(1)
        const holder = runners.find(runsHeartbeat)!
        const survivor = runners.find((r) => r !== holder)!
        await until("a heartbeat turn", 20_000, async () =>
          Number(
            (await query<{ n: number }>(
              db!.url,
              `SELECT count(*)::float8 AS n FROM switchyard_turns WHERE session = 'heartbeat'`
            ))[0].n
          ) >= 1)
        // Heartbeat turns take 2 s and the ticks coalesce: turns of the heartbeat never overlap, whoever ran them.
        const overlaps = await query(
          db!.url,
          `SELECT a.id FROM switchyard_turns a JOIN switchyard_turns b ON a.session = 'heartbeat'
      AND b.session = 'heartbeat' AND a.id < b.id AND a.started_at < b.ended_at AND b.started_at < a.ended_at`
        )
        expect(overlaps).toEqual([])
        holder.child.kill("SIGKILL")
        await holder.exited
        const killedAt = Date.now()
        await until("the heartbeat singleton to move to the survivor", 30_000, async () => runsHeartbeat(survivor))
        await until("a heartbeat turn on the survivor after the kill", 30_000, async () =>
          Number(
            (await query<{ n: number }>(
              db!.url,
              `SELECT count(*)::float8 AS n FROM switchyard_turns WHERE session = 'heartbeat' AND runner = $1 AND started_at > $2`,
              [survivor.name, killedAt]
            ))[0].n
          ) >= 1)
      },
      90_000
    )
  }
)

describe.skipIf(!up)("the fenced commit of a turn (one process)", () => {
  it(
    "a turn whose shard has a newer epoch fails Fenced and writes nothing (no outbox entry, transcript or turn record); at the current epoch it commits all three",
    async () => {
      const db = await freshDatabase("fence-commit")
      try {
        const run = (epoch: number, runId: string) =>
          Effect.runPromise(
            Effect.scoped(Effect.gen(function*() {
              const sql = yield* SqlClient.SqlClient
              yield* Effect.orDie(Migrations.migrate({ cluster: false }))
              yield* sql.unsafe(
                `INSERT INTO switchyard_shard_epochs VALUES ('default:3', 2, 'other', 0) ON CONFLICT DO NOTHING`
              )
              const outbox = yield* PgDeliveryLog.make()
              const handlers = yield* ClusterAgent.handlers({ member: "me", outbox })
              return yield* Effect.result(handlers.main({
                runId,
                lane: "main",
                key: "s1",
                generation: 0,
                command: { type: "message", session: "s1", text: "hi" },
                admittedAt: 0,
                fence: { shard: "default:3", epoch }
              }))
            })).pipe(
              Effect.provide(ScriptedModel.layer({ latencyMs: 0 })),
              Effect.provide(Postgres.layer(db.url, { maxConnections: 2 }))
            )
          )
        const stale = await run(1, "run-stale")
        expect(stale._tag === "Failure" ? (stale.failure as { _tag: string })._tag : "success").toBe("Fenced")
        const counts = () =>
          query<{ o: number; t: number; r: number }>(
            db.url,
            `SELECT (SELECT count(*) FROM switchyard_outbox)::float8 AS o,
          (SELECT count(*) FROM switchyard_transcripts)::float8 AS t, (SELECT count(*) FROM switchyard_turns)::float8 AS r`
          )
        expect((await counts()).map((c) => [Number(c.o), Number(c.t), Number(c.r)])).toEqual([[0, 0, 0]])
        const current = await run(2, "run-current")
        expect(current._tag).toBe("Success")
        expect((await counts()).map((c) => [Number(c.o), Number(c.t), Number(c.r)])).toEqual([[1, 2, 1]])
      } finally {
        await db.drop()
      }
    },
    60_000
  )
})
