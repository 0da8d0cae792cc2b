/**
 * The ingress's runs are volatile effect/cluster requests; their inbox rows are their durability
 * (src/cluster/Replay.ts). Two runner processes (lease 3 s), and the cases effect/cluster's persistence
 * covered before, now switchyard's:
 * - a send that is lost (its dispatcher committed the inbox row and died before sending): the owner's
 *   sweep runs it, once;
 * - a dispatcher waiting on an owner stopped by SIGSTOP past its lease: the new owner runs the run from
 *   its inbox row when it acquires the shard and the dispatcher's next send gets that answer; the stalled
 *   owner, woken, writes nothing (in `npm run test:cluster` only: it waits a lease and a rejoin);
 * - the owner SIGKILLed after the accept and before the turn started: the next owner runs it when it
 *   acquires the shard, the waiting client gets that answer, and the message is answered exactly once.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { freshDatabase, postgresAvailable, query } from "./pg.js"
import { shardsSettled, startRunner, status, tearDown, until } from "./support.js"
import type { RunnerProcess } from "./support.js"

const up = await postgresAvailable("test/cluster/Volatile.test.ts")
/** The SIGSTOP case waits a lease and a rejoin (~20 s): in `npm run test:cluster`, not `npm test`. */
const FULL = process.env.SWITCHYARD_CLUSTER_FULL === "1"
const LEASE_MS = 3_000
const SHARDS = 8
/** Replay.ts's default sweep age: unanswered runs whose first message is this old are sent again. */
const SWEEP_AGE_MS = 5_000
/** The runners sweep this often (`--sweep`; default 2 s), so waiting for sweeps takes little real time. */
const SWEEP_MS = 250
/**
 * The lost run's first message is dated this long before the sweep's age is reached (the test does not
 * wait out the age in real time): a sweep that ignored the age would send it within {@link SWEEP_MS}.
 */
const AGE_LEFT_MS = 4 * SWEEP_MS

interface Answer {
  readonly status: number
  readonly body: {
    readonly runId: string
    readonly pending?: boolean
    readonly reply?: { text: string; turnRunner: string }
  }
}

const send = (port: number, session: string, text: string, id: string, waitMs: number): Promise<Answer> =>
  fetch(`http://127.0.0.1:${port}/sessions/${session}/messages?wait=${waitMs}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ text, id })
  }).then(async (r) => ({ status: r.status, body: await r.json() }))

const lane = (port: number, action: "pause" | "resume") =>
  fetch(`http://127.0.0.1:${port}/lanes/main/${action}`, { method: "POST" }).then((r) => r.json())

/** How many times `r` logged that it sent the unanswered runs of shards it acquired (Replay.ts). */
const acquisitionReplays = (r: RunnerProcess) =>
  (r.log.join("").match(/replay: \d+ unanswered run\(s\) of acquired shards sent to their keys/g) ?? []).length

/** How many times `r` logged that its sweep sent unanswered runs (Replay.ts). */
const sweepReplays = (r: RunnerProcess) =>
  (r.log.join("").match(/replay: \d+ unanswered run\(s\) found by the sweep/g) ?? []).length

const waitingHere = async (port: number) => (await status(port)).lanes.find((l) => l.lane === "main")?.waiting ?? 0

describe.skipIf(!up)("volatile ingress runs: the inbox row is the durability (two runner processes)", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  const runners: Array<RunnerProcess> = []
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-volatile-"))
  const outbox = path.join(dir, "outbox.jsonl")

  /** What the database holds of a run: its turns, its outbox entries, its transcript, its answer. */
  const recordOf = async (runId: string) => {
    const [turns, replies, transcript, inbox] = await Promise.all([
      query<{ runner: string; started_at: number }>(
        db!.url,
        `SELECT runner, started_at::float8 AS started_at FROM switchyard_turns WHERE run_id = $1`,
        [runId]
      ),
      query<{ n: number }>(
        db!.url,
        `SELECT count(*)::float8 AS n FROM switchyard_outbox WHERE idempotency_key = $1`,
        [`reply:${runId}`]
      ),
      query<{ content: string }>(
        db!.url,
        `SELECT content FROM switchyard_transcripts WHERE run_id = $1 ORDER BY role DESC, part`,
        [runId]
      ),
      query<{ answered: boolean; received_at: number }>(
        db!.url,
        `SELECT answer IS NOT NULL AS answered, received_at::float8 AS received_at FROM switchyard_inbox WHERE run_id = $1`,
        [runId]
      )
    ])
    return {
      turns: turns.map((t) => ({ runner: t.runner, startedAt: Number(t.started_at) })),
      replies: Number(replies[0].n),
      transcript: transcript.map((t) => t.content),
      answered: inbox.map((r) => r.answered),
      receivedAt: inbox.map((r) => Number(r.received_at))
    }
  }

  /** A session whose turns run on `owner` now (a probe message through the other runner says where it ran). */
  const sessionOwnedBy = async (owner: RunnerProcess, tag: string) => {
    const via = runners.find((r) => r !== owner)!
    for (let i = 0; i < 40; i++) {
      const session = `${tag}-${i}`
      const probe = await send(via.port, session, "probe", `${session}-probe`, 30_000)
      expect(probe.status).toBe(200)
      if (probe.body.reply?.turnRunner === owner.name) return session
    }
    throw new Error(`no session of 40 runs on ${owner.name}`)
  }

  beforeAll(async () => {
    db = await freshDatabase("volatile")
    const args = [
      "--latency",
      "100",
      "--lease",
      String(LEASE_MS),
      "--shards",
      String(SHARDS),
      "--drain-timeout",
      "2000",
      "--sweep",
      String(SWEEP_MS)
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
    "a lost send (the inbox row committed, its dispatcher gone before sending): the owner's sweep answers it, once",
    async () => {
      const session = "lost-send"
      // A probe through the ingress records the session's shard and lane generation in its inbox row.
      const probe = await send(runners[0].port, session, "probe", "probe-1", 30_000)
      expect(probe.status).toBe(200)
      const [{ shard, generation }] = await query<{ shard: string; generation: number }>(
        db!.url,
        `SELECT shard, generation::float8 AS generation FROM switchyard_inbox WHERE run_id = $1`,
        [probe.body.runId]
      )
      // What a dispatcher that died between its accept and its send leaves: the slot and the inbox row, no
      // send. Dated as if it had waited most of the sweep's age already (the age is not waited out here).
      const sweptBefore = runners.map(sweepReplays)
      const [{ run_id: runId }] = await query<{ run_id: string }>(
        db!.url,
        `SELECT out_run_id AS run_id FROM switchyard_coalesce_slot('main', $1, $1, 'lost-1', 'lost', $2, $3, $4)`,
        [session, Date.now() - SWEEP_AGE_MS + AGE_LEFT_MS, shard, generation]
      )
      await until("the sweep to answer the lost run", 20_000, async () => (await recordOf(runId)).turns.length > 0)
      const record = await recordOf(runId)
      expect(record).toMatchObject({ replies: 1, transcript: ["lost", "You said: lost"], answered: [true] })
      expect(record.turns).toHaveLength(1)
      // Sent by a sweep (one runner logged that it found it), once its first message was older than the
      // sweep's age, not by anything sooner (sweeps ran every 250 ms during the last AGE_LEFT_MS).
      await until(
        "a runner to log that its sweep sent the lost run",
        10_000,
        async () => runners.some((r, i) => sweepReplays(r) > sweptBefore[i]!)
      )
      expect(record.turns[0].startedAt - record.receivedAt[0]).toBeGreaterThanOrEqual(SWEEP_AGE_MS)
      // Later sweeps find it answered. A sweep in flight when the turn was seen may have read the inbox
      // before the answer committed, so: one more sweep of every runner (`mid`: every sweep counted after
      // it began after the answer), then two more, which must have sent nothing (`replayed` unchanged; the
      // run is answered and nothing else is unanswered) and run nothing (still one turn, one reply).
      const counters = () => Promise.all(runners.map(async (r) => (await status(r.port)).counters))
      const sweptSince = (since: ReadonlyArray<Readonly<Record<string, number>>>, n: number) =>
        until(
          `${n} more sweep(s) on every runner`,
          20_000,
          async () => (await counters()).every((c, i) => c.replaySweeps >= since[i].replaySweeps + n)
        )
      await sweptSince(await counters(), 1)
      const mid = await counters()
      await sweptSince(mid, 2)
      expect((await counters()).map((c) => c.replayed)).toEqual(mid.map((c) => c.replayed))
      expect((await recordOf(runId)).turns).toHaveLength(1)
      expect((await recordOf(runId)).replies).toBe(1)
    },
    60_000
  )

  it.runIf(FULL)(
    "a dispatcher waiting on an owner SIGSTOPped past its lease gets the new owner's answer; the woken owner writes nothing",
    async () => {
      const [a, b] = runners
      const session = await sessionOwnedBy(b, "stalled")
      expect(await lane(b.port, "pause")).toMatchObject({ paused: true })
      const waiting = send(a.port, session, "while stalled", "stalled-1", 30_000)
      // Accepted, and on b's paused lane: admitted there, not started.
      await until("the run to wait on b's paused lane", 10_000, async () => (await waitingHere(b.port)) > 0)
      const replays = acquisitionReplays(a)
      b.child.kill("SIGSTOP")
      let answer: Answer
      try {
        answer = await waiting
      } finally {
        b.child.kill("SIGCONT")
      }
      expect([answer.status, answer.body.reply?.text, answer.body.reply?.turnRunner]).toEqual([
        200,
        "You said: while stalled",
        a.name
      ])
      // Woken, b loses the key (its lane's run is canceled) and writes nothing.
      await until("b to drop the stalled run", 20_000, async () => (await waitingHere(b.port)) === 0)
      expect(await lane(b.port, "resume")).toMatchObject({ paused: false })
      const record = await recordOf(answer.body.runId)
      expect(record).toMatchObject({
        replies: 1,
        transcript: ["while stalled", "You said: while stalled"],
        answered: [true]
      })
      expect(record.turns.map((t) => t.runner)).toEqual([a.name])
      expect(acquisitionReplays(a)).toBeGreaterThan(replays)
      await shardsSettled(runners.map((r) => r.port), SHARDS, 40_000)
    },
    90_000
  )

  it(
    "the owner SIGKILLed after the accept and before the turn started: the next owner answers it exactly once, to the waiting client",
    async () => {
      const [a, b] = runners
      const session = await sessionOwnedBy(b, "killed")
      const second = await sessionOwnedBy(b, "accepted")
      expect(await lane(b.port, "pause")).toMatchObject({ paused: true })
      const waiting = send(a.port, session, "before the turn", "killed-1", 30_000)
      const other = await send(a.port, second, "accepted only", "killed-2", 0)
      expect(other.status).toBe(202)
      await until("both runs to wait on b's paused lane", 10_000, async () => (await waitingHere(b.port)) === 2)
      const replays = acquisitionReplays(a)
      b.child.kill("SIGKILL")
      b.alive = false
      const answer = await waiting
      expect([answer.status, answer.body.reply?.text, answer.body.reply?.turnRunner]).toEqual([
        200,
        "You said: before the turn",
        a.name
      ])
      const record = await recordOf(answer.body.runId)
      expect(record).toMatchObject({
        replies: 1,
        transcript: ["before the turn", "You said: before the turn"],
        answered: [true]
      })
      expect(record.turns.map((t) => t.runner)).toEqual([a.name])
      // Sent by a's replay of the shards it acquired from b (not only by the sweep, or the client's resend).
      expect(acquisitionReplays(a)).toBeGreaterThan(replays)
      // A message only accepted (202) when the owner died is answered by the next owner too, once.
      await until(
        "the accepted message's turn",
        20_000,
        async () => (await recordOf(other.body.runId)).turns.length > 0
      )
      const otherRecord = await recordOf(other.body.runId)
      expect(otherRecord).toMatchObject({
        replies: 1,
        transcript: ["accepted only", "You said: accepted only"],
        answered: [true]
      })
      expect(otherRecord.turns.map((t) => t.runner)).toEqual([a.name])
    },
    90_000
  )
})
