/**
 * The multi-process test of cluster.md: three runner processes on loopback sharing one Postgres,
 * 50 sessions, messages sent to random runners, one runner killed with SIGKILL in the middle of the
 * load, and a cron job due every second. Every turn is recorded by the runner that ran it
 * (`switchyard_turns`: session, runner, start, end, shard and fencing epoch); the assertions read that table.
 *
 * `npm test` runs 300 messages; `npm run test:cluster` runs the full 1000.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { freshDatabase, postgresAvailable, query } from "./pg.js"
import { postMessage, shardsSettled, startRunner, tearDown, until } from "./support.js"
import type { RunnerProcess } from "./support.js"

const up = await postgresAvailable("test/cluster/ClusterRunners.test.ts")
const FULL = process.env.SWITCHYARD_CLUSTER_FULL === "1"
const MESSAGES = FULL ? 1000 : 300
const SESSIONS = 50
const RUNNERS = 3
const LATENCY_MS = 20

/** A seeded PRNG (mulberry32), so a failing run can be replayed. */
const prng = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

describe.skipIf(!up)("three runner processes on one Postgres", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  const runners: Array<RunnerProcess> = []
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-cluster-"))
  const outbox = path.join(dir, "outbox.jsonl")

  beforeAll(async () => {
    db = await freshDatabase("runners")
    // All at the same moment on the empty database, as the README's recipe does: they must not race on the schema.
    const started = await Promise.allSettled(Array.from({ length: RUNNERS }, () =>
      startRunner({
        url: db!.url,
        outbox,
        args: [
          "--latency",
          String(LATENCY_MS),
          "--main-concurrent",
          "8",
          "--drain-timeout",
          "2000",
          "--delivery-timeout",
          "2000",
          // The killed runner's shards move once its heartbeat is a lease old.
          "--lease",
          "4000",
          "--cron",
          "* * * * * *|tick"
        ]
      })))
    for (const s of started) if (s.status === "fulfilled") runners.push(s.value)
    const failed = started.filter((s) => s.status === "rejected").map((s) =>
      String((s as PromiseRejectedResult).reason)
    )
    expect(failed).toEqual([])
    await shardsSettled(runners.map((r) => r.port), 32)
  }, 120_000)

  afterAll(async () => {
    await tearDown(runners, db, dir)
  }, 60_000)

  it(
    "three runners started at the same moment on a fresh database all come up: each ready line names the runner's own pid, each answers a message",
    async () => {
      expect(runners.map((r) => r.ready?.pid)).toEqual(runners.map((r) => r.child.pid))
      const answers = await Promise.all(runners.map((r) => postMessage(r.port, `hello-${r.name}`, `hi ${r.name}`)))
      expect(answers.map((a) => [a.status, a.body.reply?.text])).toEqual(
        runners.map((r) => [200, `You said: hi ${r.name}`])
      )
      const migrations = await query<{ n: number }>(db!.url, `SELECT count(*)::float8 AS n FROM switchyard_migrations`)
      expect(Number(migrations[0].n)).toBe(10)
    },
    60_000
  )

  it(
    `${MESSAGES} messages of ${SESSIONS} sessions to random runners, one SIGKILLed mid-load: every accepted message answered once per turn record, no two turns of a session overlap, cron once per second`,
    async () => {
      const random = prng(42)
      // By message id: messages of a session that arrive while its turn runs share the next run.
      const accepted = new Map<string, { session: string; via: string; runId: string }>()
      const victim = runners[0]
      const killAt = Math.floor(MESSAGES * 0.4)
      let sent = 0
      let killedAt = 0
      let refusedByDead = 0
      let busy = 0
      const t0 = Date.now()

      const send = async (i: number) => {
        const session = `s${Math.floor(random() * SESSIONS)}`
        const id = `m${i}`
        // A refused or cut request is sent again, with the same id, to another live runner: the id makes
        // the retry join the first run if that one was in fact accepted.
        for (let attempt = 0; attempt < 20; attempt++) {
          const live = runners.filter((r) => r.alive)
          const r = live[Math.floor(random() * live.length)]
          try {
            const res = await fetch(`http://127.0.0.1:${r.port}/sessions/${session}/messages`, {
              method: "POST",
              headers: { "content-type": "application/json" },
              body: JSON.stringify({ text: `hello ${i}`, id })
            })
            const body = (await res.json()) as { runId?: string }
            if (res.status === 202 && body.runId) {
              accepted.set(id, { session, via: r.name, runId: body.runId })
              return
            }
            if (res.status === 429) {
              // backpressure: this runner holds as many unanswered dispatches as its lane allows
              busy++
              attempt--
              await new Promise((w) => setTimeout(w, 25))
              continue
            }
            throw new Error(`status ${res.status}: ${JSON.stringify(body)}`)
          } catch (e) {
            if (r === victim && !victim.alive) refusedByDead++
            else if (attempt > 3) throw e
          }
        }
        throw new Error(`message ${id} never accepted`)
      }

      // 24 senders at a time; the victim dies once `killAt` messages went out.
      let next = 0
      const sender = async () => {
        while (next < MESSAGES) {
          const i = next++
          if (i === killAt) {
            victim.child.kill("SIGKILL")
            victim.alive = false
            killedAt = Date.now()
          }
          await send(i)
          sent++
        }
      }
      await Promise.all(Array.from({ length: 24 }, sender))
      const sentAt = Date.now()
      expect(sent).toBe(MESSAGES)
      expect(accepted.size).toBe(MESSAGES)

      // Every accepted message gets its turn (replayed on another runner when its runner died).
      const runIds = [...new Set([...accepted.values()].map((a) => a.runId))]
      await until("every accepted message to be answered", 90_000, async () => {
        const rows = await query<{ n: number }>(
          db!.url,
          `SELECT count(DISTINCT run_id)::float8 AS n FROM switchyard_turns WHERE run_id = ANY($1)`,
          [runIds]
        )
        return Number(rows[0].n) === runIds.length
      })
      const answeredAt = Date.now()
      // ... and its reply delivered from the shared outbox.
      await until("every reply to be delivered", 60_000, async () => {
        const rows = await query<{ n: number }>(
          db!.url,
          `SELECT count(*)::float8 AS n FROM switchyard_outbox WHERE status <> 'acked'`
        )
        return Number(rows[0].n) === 0
      })

      const overlaps = await query<{ session: string; a: string; b: string }>(
        db!.url,
        `
      SELECT a.session, a.runner || ':' || a.run_id AS a, b.runner || ':' || b.run_id AS b
      FROM switchyard_turns a JOIN switchyard_turns b
        ON a.session = b.session AND a.id < b.id AND a.started_at < b.ended_at AND b.started_at < a.ended_at`
      )
      expect(overlaps).toEqual([])

      // At least once, and only across a change of the key's shard owner. A run recorded twice committed
      // its first turn, then lost its answer because its runner lost the shard before the answer was saved:
      // killed, or (a live runner) in a handoff — when the victim leaves, the hash ring moves some shards
      // between the survivors too, and a runner marked unhealthy under load loses its shards for a while
      // (docs/cluster.md: running turns are cancelled and run again by the next owner). Every turn records
      // the shard and fencing epoch it committed under (bumped at each acquisition), so the invariant is:
      // one run never commits twice under one epoch of its shard (that would be a second run while its
      // first runner still held the shard), and each replay committed under a higher epoch of the same
      // shard than the turn before it.
      const unfenced = await query<{ n: number }>(
        db!.url,
        `SELECT count(*)::float8 AS n FROM switchyard_turns WHERE epoch IS NULL OR shard IS NULL`
      )
      expect(Number(unfenced[0].n)).toBe(0)
      const replays = await query<
        { run_id: string; runners: Array<string>; shards: Array<string>; epochs: Array<number> }
      >(
        db!.url,
        `
      SELECT run_id, array_agg(runner ORDER BY started_at, id) AS runners, array_agg(shard ORDER BY started_at, id) AS shards,
             array_agg(epoch::float8 ORDER BY started_at, id) AS epochs
      FROM switchyard_turns GROUP BY run_id HAVING count(*) > 1`
      )
      for (const r of replays) {
        const epochs = r.epochs.map(Number)
        expect({ run: r.run_id, shards: new Set(r.shards).size }).toEqual({ run: r.run_id, shards: 1 })
        expect({ run: r.run_id, epochs, increasing: epochs.every((e, i) => i === 0 || e > epochs[i - 1]) }).toEqual({
          run: r.run_id,
          epochs,
          increasing: true
        })
      }
      const replayedFromLive = replays.filter((r) => r.runners[0] !== victim.name).map((r) => ({
        run: r.run_id,
        runners: r.runners,
        epochs: r.epochs.map(Number)
      }))

      const replies = await query<{ n: number; keys: number }>(
        db!.url,
        `
      SELECT count(*)::float8 AS n, count(DISTINCT idempotency_key)::float8 AS keys FROM switchyard_outbox WHERE idempotency_key LIKE 'reply:coalesce:main:s%'`
      )
      expect(Number(replies[0].keys)).toBe(runIds.length)
      expect(Number(replies[0].n)).toBe(runIds.length) // one reply per run, even for turns replayed after the kill
      // Every message is in the inbox once, recorded for the run that answered it (together with the
      // others of its session that arrived while the turn before ran).
      const inbox = await query<{ n: number; runs: number; messages: number }>(
        db!.url,
        `
      SELECT count(*)::float8 AS n, count(DISTINCT run_id)::float8 AS runs, count(DISTINCT message_id)::float8 AS messages FROM switchyard_inbox WHERE session LIKE 's%'`
      )
      expect([Number(inbox[0].n), Number(inbox[0].messages), Number(inbox[0].runs)]).toEqual([
        MESSAGES,
        MESSAGES,
        runIds.length
      ])

      // Sessions the victim served before it died went on on the other runners.
      const moved = await query<{ session: string }>(
        db!.url,
        `
      SELECT DISTINCT v.session FROM switchyard_turns v JOIN switchyard_turns o
        ON o.session = v.session AND o.runner <> $1 AND o.started_at > $2
      WHERE v.runner = $1`,
        [victim.name, killedAt]
      )
      const victimSessions = await query<{ session: string }>(
        db!.url,
        `SELECT DISTINCT session FROM switchyard_turns WHERE runner = $1`,
        [victim.name]
      )
      expect(victimSessions.length).toBeGreaterThan(0)
      // How long the victim's sessions waited: from the kill to their first turn elsewhere.
      const resumed = await query<{ ms: number }>(
        db!.url,
        `
      SELECT (min(o.started_at) - $2)::float8 AS ms FROM switchyard_turns o
      WHERE o.runner <> $1 AND o.started_at > $2 AND o.session IN (SELECT session FROM switchyard_turns WHERE runner = $1)
      GROUP BY o.session`,
        [victim.name, killedAt]
      )
      const resumeMs = resumed.map((r) => Number(r.ms)).sort((x, y) => x - y)
      expect(moved.length).toBeGreaterThan(0)

      // Cron: ClusterCron fires each due second once in the whole cluster; a firing caught by the SIGKILL
      // (or a shard move) before its reply was saved is fired again (at least once), and that replay starts
      // nothing (ClusterCronJobs.fire): every cron run is the run of a due time's first firing.
      const firings = await query<{ due: number; fired: number; run_id: string }>(
        db!.url,
        `SELECT due_at::float8 AS due, fired, run_id FROM switchyard_cron_firings ORDER BY due_at`
      )
      const refired = firings.filter((f) => f.fired !== 1).map((f) => ({
        sinceStartMs: Number(f.due) - t0,
        fired: f.fired
      }))
      const cronRuns = await query<{ run_id: string; n: number }>(
        db!.url,
        `SELECT run_id, count(*)::float8 AS n FROM switchyard_turns WHERE session = 'cron:cron-1' GROUP BY run_id`
      )
      expect(cronRuns.length).toBeGreaterThan(0)
      const replayed = new Set(replays.map((r) => r.run_id))
      expect(cronRuns.filter((r) => Number(r.n) !== 1 && !replayed.has(r.run_id))).toEqual([])
      const firedRuns = new Set(firings.map((f) => f.run_id))
      expect(cronRuns.filter((r) => !firedRuns.has(r.run_id))).toEqual([])
      const dues = firings.map((f) => Number(f.due))
      const span = (dues[dues.length - 1] - dues[0]) / 1000 + 1
      // Seconds with no firing: only when the cron chain was lost with the killed runner.
      const gaps = []
      for (let i = 1; i < dues.length; i++) {
        if (dues[i] - dues[i - 1] > 1000) gaps.push({ from: dues[i - 1], to: dues[i] })
      }
      for (const g of gaps) {
        expect(g.to).toBeGreaterThanOrEqual(killedAt - 1000)
        expect(g.from).toBeLessThanOrEqual(killedAt + 30_000)
      }
      expect(dues.length).toBeGreaterThanOrEqual(Math.floor(span * 0.5))

      const turnsPerRunner = await query<{ runner: string; n: number }>(
        db!.url,
        `SELECT runner, count(*)::float8 AS n FROM switchyard_turns WHERE session LIKE 's%' GROUP BY runner ORDER BY runner`
      )
      const duplicates = await query<{ n: number }>(
        db!.url,
        `SELECT (count(*) - count(DISTINCT run_id))::float8 AS n FROM switchyard_turns WHERE session LIKE 's%'`
      )
      console.log(JSON.stringify({
        messages: MESSAGES,
        sessions: SESSIONS,
        sendMs: sentAt - t0,
        answeredMs: answeredAt - t0,
        messagesPerSecond: Math.round(MESSAGES / ((answeredAt - t0) / 1000)),
        killedAfterMs: killedAt - t0,
        refusedByDeadRunner: refusedByDead,
        backpressure429: busy,
        turnsPerRunner: Object.fromEntries(turnsPerRunner.map((r) => [r.runner, Number(r.n)])),
        replayedTurns: Number(duplicates[0].n),
        runs: runIds.length,
        replayedRuns: replays.map((r) => r.run_id),
        replayedFromLiveRunner: replayedFromLive,
        sessionsMovedFromVictim: `${moved.length}/${victimSessions.length}`,
        victimSessionsResumedAfterMs: { min: resumeMs[0], max: resumeMs[resumeMs.length - 1] },
        cron: {
          firings: dues.length,
          runs: cronRuns.length,
          spanSeconds: span,
          missedSeconds: gaps.map((g) => (g.to - g.from) / 1000 - 1),
          refired
        }
      }))
    },
    FULL ? 240_000 : 150_000
  )
})
