/**
 * Across processes: restartLane makes every older run stale on every runner before it returns;
 * pause and limits act on one runner only (the sessions whose shards it holds); and
 * SIGTERM while clients wait on turns: they get their replies (or, past the deadline, a 202 `pending`
 * that a later runner honours), and the runner prints its last line and exits 0 within
 * `--drain-timeout`, the deadline of the whole shutdown.
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Postgres from "../../src/cluster/Postgres.js"
import { freshDatabase, postgresAvailable } from "./pg.js"
import { postMessage, shardsSettled, startRunner, status, tearDown, terminate, until } from "./support.js"
import type { RunnerProcess } from "./support.js"

const up = await postgresAvailable("test/cluster/ClusterRestart.test.ts")
const LATENCY = 3000
/** Runner a's and runner b's `--drain-timeout`: a's is shorter than a turn, b's is longer. */
const DRAIN_A = 2500
const DRAIN_B = 6000
/** What a process needs beyond its own deadline to be seen gone: signal delivery, exit, reaping. */
const EXIT_SLACK_MS = 500

const mainLane = async (port: number) => (await status(port)).lanes.find((l) => l.lane === "main")!

/** A lane control of one runner's HTTP API: its JSON answer. */
const control = async (port: number, method: string, path: string, body?: unknown) =>
  (await fetch(`http://127.0.0.1:${port}${path}`, {
    method,
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })).json()

/** Lane `main` as `GET /lanes` of one runner shows it. */
const laneHere = async (port: number) =>
  ((await control(port, "GET", "/lanes")).lanes as ReadonlyArray<
    { lane: string; running: number; waiting: number; paused: boolean; concurrent: number; queued: number }
  >).find((l) => l.lane === "main")!

describe.skipIf(!up)("restartLane and SIGTERM across runner processes", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  const runners: Array<RunnerProcess> = []
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-restart-"))

  beforeAll(async () => {
    db = await freshDatabase("restart")
    // Both at the same moment on the empty database.
    runners.push(
      ...await Promise.all([DRAIN_A, DRAIN_B].map((drain) =>
        startRunner({
          url: db!.url,
          outbox: path.join(dir, "outbox.jsonl"),
          args: ["--latency", String(LATENCY), "--drain-timeout", String(drain), "--delivery-timeout", "2000"]
        })
      ))
    )
    await until(
      "both runners to see each other",
      20_000,
      async () => (await status(runners[0].port)).members.length === 2
    )
    await shardsSettled(runners.map((r) => r.port), 32)
  }, 90_000)

  afterAll(async () => {
    await tearDown(runners, db, dir)
  }, 60_000)

  it(
    "restartLane from one runner: runs of the older generation fail stale on every runner, none is left running when it returns, later messages are answered",
    async () => {
      const [a, b] = runners
      const pending = Array.from(
        { length: 12 },
        (_, i) => postMessage(i % 2 === 0 ? a.port : b.port, `restart-${i}`, `hi ${i}`)
      )
      await until("turns to run on both runners", 20_000, async () => {
        const [la, lb] = await Promise.all([mainLane(a.port), mainLane(b.port)])
        return la.running + la.waiting > 0 && lb.running + lb.waiting > 0 &&
          la.running + la.waiting + lb.running + lb.waiting === 12
      })
      const res = await fetch(`http://127.0.0.1:${b.port}/lanes/main/restart`, { method: "POST" })
      expect(await res.json()).toEqual({ lane: "main", generation: 1 })
      // When restartLane returned, no run of generation 0 is left anywhere.
      for (const r of runners) {
        const lane = await mainLane(r.port)
        expect({ runner: r.name, running: lane.running, waiting: lane.waiting, generation: lane.generation })
          .toEqual({ runner: r.name, running: 0, waiting: 0, generation: 1 })
      }
      const outcomes = await Promise.all(pending)
      expect(outcomes.map((o) => `${o.status}:${o.body.reason}`)).toEqual(Array(12).fill("502:stale"))
      const after = await postMessage(a.port, "restart-0", "after the restart")
      expect(after.status).toBe(200)
      expect(after.body.reply?.text).toBe("You said: after the restart")
    },
    60_000
  )

  it(
    "pause and limits act on one runner: a's paused main holds the sessions whose shards a holds while b answers its own; a's limits are its own; resume starts a's under them",
    async () => {
      const [a, b] = runners
      expect(await control(a.port, "POST", "/lanes/main/pause")).toEqual({ lane: "main", runner: a.name, paused: true })
      // b runs all of its share at once (one turn's time); a keeps its 4.
      expect(await control(b.port, "PUT", "/lanes/main/limits", { concurrent: 8 })).toMatchObject({ concurrent: 8 })
      expect(await laneHere(b.port)).toMatchObject({ paused: false, concurrent: 8 })
      expect(await laneHere(a.port)).toMatchObject({ paused: true, concurrent: 4 })
      // Sessions sent through b: those whose shard a holds wait on a, b runs the others meanwhile.
      const all: Array<ReturnType<typeof postMessage>> = []
      let done = 0 // answered while a is paused: by b
      let held = 0
      for (let batch = 0; held === 0; batch++) {
        for (let i = 0; i < 8; i++) {
          all.push(postMessage(b.port, `pause-${batch}-${i}`, "hi").finally(() => void done++))
        }
        await until("each message to run on b (or be answered) or to wait on a", 30_000, async () => {
          const [la, lb] = await Promise.all([laneHere(a.port), laneHere(b.port)])
          expect(la.running).toBe(0)
          // b's share runs at once (its limit is 8): none of it waits.
          return la.waiting + lb.running + done === all.length
        })
        held = (await laneHere(a.port)).waiting
        if (held === 0) await Promise.all(all) // all 8 on b (p = 1/256): another batch
      }
      expect(await control(a.port, "PUT", "/lanes/main/limits", { concurrent: 1 })).toEqual({
        lane: "main",
        runner: a.name,
        concurrent: 1,
        queued: 64
      })
      expect(await laneHere(b.port)).toMatchObject({ concurrent: 8, queued: 64 })
      await control(b.port, "PUT", "/lanes/main/limits", { concurrent: 4 })
      expect(await control(a.port, "POST", "/lanes/main/resume")).toEqual({
        lane: "main",
        runner: a.name,
        paused: false
      })
      let one = await laneHere(a.port)
      await until("a's first held session to start", 20_000, async () => {
        one = await laneHere(a.port)
        expect(one.running).toBeLessThanOrEqual(1)
        return one.running === 1
      })
      expect(one.running + one.waiting).toBeLessThanOrEqual(held)
      // A larger limit starts what waits at once: at most what is over the new limit still waits.
      await control(a.port, "PUT", "/lanes/main/limits", { concurrent: 8 })
      const grown = await laneHere(a.port)
      expect(grown.running).toBeLessThanOrEqual(8)
      expect(grown.waiting).toBeLessThanOrEqual(Math.max(0, one.running + one.waiting - 8))
      const outcomes = await Promise.all(all)
      expect(outcomes.map((r) => r.status)).toEqual(outcomes.map(() => 200))
      // The sessions a held were answered by a, once resumed; every other one by b.
      expect(outcomes.filter((r) => r.body.reply?.turnRunner === a.name)).toHaveLength(held)
      expect(outcomes.filter((r) => r.body.reply?.turnRunner === b.name)).toHaveLength(outcomes.length - held)
      await control(a.port, "PUT", "/lanes/main/limits", { concurrent: 4 })
      expect(await laneHere(a.port)).toMatchObject({ paused: false, concurrent: 4, queued: 64, running: 0, waiting: 0 })
    },
    90_000
  )

  it(
    "SIGTERM while a client waits on a turn of the stopping runner, sent through it: the client gets the reply, the runner prints its shutdown line and exits 0 within --drain-timeout",
    async () => {
      const [a, b] = runners
      // A session whose turn runs on b, sent through b, waited on through b.
      let waiting: ReturnType<typeof postMessage> | undefined
      for (let i = 0; waiting === undefined && i < 40; i++) {
        const pending = postMessage(b.port, `term-${i}`, "last words")
        await until(`the turn of term-${i} to start`, 20_000, async () => {
          const [la, lb] = await Promise.all([mainLane(a.port), mainLane(b.port)])
          return la.running + lb.running >= 1
        })
        if ((await mainLane(b.port)).running > 0) waiting = pending
        else await pending
      }
      expect(waiting).toBeDefined()
      const stopped = await terminate(b)
      const reply = await waiting!
      expect(reply.status).toBe(200)
      expect(reply.body.reply).toEqual(expect.objectContaining({ text: "You said: last words", turnRunner: b.name }))
      // `turnRunner` is the runner whose turn committed (its turn record), `deliveryId` the id of the
      // reply's outbox entry: the line with that id names the runner that delivered it, which may be a
      // (b stopped before its deliverer took the entry) or b.
      const turns = await Effect.runPromise(
        Postgres.withClient(
          db!.url,
          (sql) =>
            sql.unsafe<{ runner: string }>(`SELECT runner FROM switchyard_turns WHERE run_id = $1`, [reply.body.runId])
        )
      )
      expect(turns.map((t) => t.runner)).toEqual([b.name])
      let line: { id: string; session: string; text: string; deliveredBy: string } | undefined
      await until("the reply's line in the outbox file", 20_000, async () => {
        line = fs.readFileSync(path.join(dir, "outbox.jsonl"), "utf8").split("\n").filter((l) => l !== "")
          .map((l) => JSON.parse(l)).find((l) => l.id === reply.body.reply!.deliveryId)
        return line !== undefined
      })
      expect(line).toEqual({
        id: reply.body.reply!.deliveryId,
        session: expect.stringMatching(/^term-\d+$/),
        text: "You said: last words",
        deliveredBy: expect.stringMatching(new RegExp(`^(${a.name}|${b.name})$`))
      })
      expect(stopped.code).toBe(0)
      expect(stopped.ms).toBeLessThanOrEqual(DRAIN_B + EXIT_SLACK_MS)
      const last = JSON.parse(b.stdout[b.stdout.length - 1])
      expect(last).toEqual(
        expect.objectContaining({ type: "shutdown", name: b.name, pid: b.child.pid, signal: "SIGTERM" })
      )
      expect(last.drain).toEqual({ completed: 1, canceled: 0, timedOut: false })
    },
    90_000
  )

  it(
    "SIGTERM while a client waits on a turn longer than the deadline: the client gets 202 pending in time, the runner exits 0 within --drain-timeout, and the next runner answers the message",
    async () => {
      const [a] = runners
      await shardsSettled([a.port], 32)
      const waiting = postMessage(a.port, "longer-than-the-deadline", "still there?")
      await until("the turn to start on a", 20_000, async () => (await mainLane(a.port)).running === 1)
      const stopped = await terminate(a)
      const reply = await waiting
      expect({ status: reply.status, pending: reply.body.pending }).toEqual({ status: 202, pending: true })
      expect(stopped.code).toBe(0)
      expect(stopped.ms).toBeLessThanOrEqual(DRAIN_A + EXIT_SLACK_MS)
      expect(JSON.parse(a.stdout[a.stdout.length - 1])).toEqual(
        expect.objectContaining({ type: "shutdown", name: a.name, signal: "SIGTERM" })
      )
      // The message was durable: a runner started afterwards answers it into the outbox.
      runners.push(
        await startRunner({ url: db!.url, outbox: path.join(dir, "outbox.jsonl"), args: ["--latency", "0"] })
      )
      await until("the pending message to be answered", 30_000, async () => {
        const rows = await Effect.runPromise(
          Postgres.withClient(db!.url, (sql) =>
            sql.unsafe<{ n: number }>(
              `SELECT count(*)::float8 AS n FROM switchyard_outbox WHERE idempotency_key = $1`,
              [`reply:${reply.body.runId}`]
            ))
        )
        return Number(rows[0].n) === 1
      })
    },
    90_000
  )
})
