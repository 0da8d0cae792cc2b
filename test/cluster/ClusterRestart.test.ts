/**
 * Across processes: restartLane makes every older run stale on every runner before it returns, and
 * SIGTERM drains a runner (its running turn finishes and is answered) before it exits 0.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { freshDatabase, postgresAvailable } from "./pg.js"
import { shardsSettled, startRunner, status, until } from "./support.js"
import type { RunnerProcess } from "./support.js"

const up = await postgresAvailable("test/cluster/ClusterRestart.test.ts")
const LATENCY = 3000

const post = (port: number, session: string, text: string) =>
  fetch(`http://127.0.0.1:${port}/sessions/${session}/messages?wait=30000`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ text })
  }).then(async (r) => ({ status: r.status, body: (await r.json()) as { reason?: string; reply?: { text: string; runner: string } } }))

const mainLane = async (port: number) => (await status(port)).lanes.find((l) => l.lane === "main")!

describe.skipIf(!up)("restartLane and SIGTERM across runner processes", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  const runners: Array<RunnerProcess> = []
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-restart-"))

  beforeAll(async () => {
    db = await freshDatabase("restart")
    for (let i = 0; i < 2; i++) {
      runners.push(await startRunner({
        url: db.url,
        outbox: path.join(dir, "outbox.jsonl"),
        args: ["--latency", String(LATENCY), "--drain-timeout", "15000", "--delivery-timeout", "2000"]
      }))
    }
    await until("both runners to see each other", 20_000, async () => (await status(runners[0].port)).members.length === 2)
    await shardsSettled(runners.map((r) => r.port), 32)
  }, 90_000)

  afterAll(async () => {
    for (const r of runners) if (r.alive) r.child.kill("SIGKILL")
    await Promise.all(runners.map((r) => r.exited))
    await db?.drop()
    fs.rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  it("restartLane from one runner: runs of the older generation fail stale on every runner, none is left running when it returns, later messages are answered", async () => {
    const [a, b] = runners
    const pending = Array.from({ length: 12 }, (_, i) => post(i % 2 === 0 ? a.port : b.port, `restart-${i}`, `hi ${i}`))
    await until("turns to run on both runners", 20_000, async () => {
      const [la, lb] = await Promise.all([mainLane(a.port), mainLane(b.port)])
      return la.running + la.waiting > 0 && lb.running + lb.waiting > 0 && la.running + la.waiting + lb.running + lb.waiting === 12
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
    const after = await post(a.port, "restart-0", "after the restart")
    expect(after.status).toBe(200)
    expect(after.body.reply?.text).toBe("You said: after the restart")
  }, 60_000)

  it("SIGTERM: the runner stops taking messages, its running turn finishes and is answered, it exits 0", async () => {
    const [a, b] = runners
    // Find a session that runs on runner b, send through a, then stop b mid-turn.
    let session = ""
    const replies = []
    for (let i = 0; session === "" && i < 40; i++) {
      const s = `term-${i}`
      replies.push(post(a.port, s, "last words"))
      await until(`the turn of ${s} to start`, 20_000, async () => {
        const [la, lb] = await Promise.all([mainLane(a.port), mainLane(b.port)])
        return la.running + lb.running >= 1
      })
      if ((await mainLane(b.port)).running > 0) session = s
      else await replies[replies.length - 1]
    }
    expect(session).not.toBe("")
    b.child.kill("SIGTERM")
    expect(await b.exited).toBe(0)
    const reply = await replies[replies.length - 1]
    expect(reply.status).toBe(200)
    expect(reply.body.reply).toEqual(expect.objectContaining({ text: "You said: last words", runner: b.name }))
  }, 90_000)
})
