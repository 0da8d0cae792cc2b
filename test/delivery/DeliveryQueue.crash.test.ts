/**
 * DeliveryQueue under SIGKILL: a child process enqueues and delivers over the real file log and is
 * killed at random moments; the next child replays. At the end every enqueued entry was delivered at
 * least once; per recipient, deliveries are in seq order, and an entry is delivered again only when it
 * was the last one delivered to its recipient before a kill (its ack had not reached the disk).
 */
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, assert, describe, it } from "@effect/vitest"

const child = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "queueChild.ts")
const root = mkdtempSync(join(tmpdir(), "switchyard-queue-crash-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))

interface Line {
  readonly kind: "E" | "D"
  readonly id: string
  readonly to: string
  readonly seq: number
  readonly round: number
}

/** Runs one child; SIGKILLs it once `killAfter` D lines arrived (never, when undefined). */
const runChild = (dir: string, round: number, enqueue: boolean, killAfter: number | undefined, lines: Array<Line>) =>
  new Promise<{ readonly killed: boolean; readonly done: string | undefined }>((resolve, reject) => {
    const proc = spawn(process.execPath, ["--import", "tsx", child, dir, enqueue ? "1" : "0"], { stdio: ["ignore", "pipe", "pipe"] })
    let buffered = ""
    let delivered = 0
    let killed = false
    let done: string | undefined
    let stderr = ""
    proc.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d))
    proc.stdout.setEncoding("utf8").on("data", (d: string) => {
      buffered += d
      let nl: number
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, nl)
        buffered = buffered.slice(nl + 1)
        if (line.startsWith("done")) done = line
        if (line[0] !== "E" && line[0] !== "D") continue
        const [kind, id, to, seq] = line.split(" ")
        lines.push({ kind: kind as "E" | "D", id, to, seq: Number(seq), round })
        if (kind === "D" && ++delivered === killAfter && !killed) {
          killed = true
          proc.kill("SIGKILL")
        }
      }
    })
    proc.on("error", reject)
    proc.on("exit", (code, signal) => {
      if (signal === "SIGKILL" || code === 0) resolve({ killed: signal === "SIGKILL", done })
      else reject(new Error(`child exited ${code}: ${stderr}`))
    })
  })

describe("DeliveryQueue crash", () => {
  it("SIGKILL at random moments loses nothing and keeps order per recipient (at least once)", async () => {
    const dir = join(root, "q")
    const lines: Array<Line> = []
    // Round 0 enqueues 200 entries and is killed mid-way; rounds 1-2 replay and are killed; round 3 finishes.
    const kills = [10 + Math.floor(Math.random() * 60), 1 + Math.floor(Math.random() * 30), 1 + Math.floor(Math.random() * 30)]
    for (let round = 0; round < kills.length; round++) {
      const r = await runChild(dir, round, round === 0, kills[round], lines)
      assert.isTrue(r.killed, `round ${round} was killed mid-way`)
    }
    const final = await runChild(dir, kills.length, false, undefined, lines)
    assert.strictEqual(final.done, "done 0 0", "nothing pending or dead at the end")

    const enqueued = lines.filter((l) => l.kind === "E")
    assert.isTrue(lines.some((l) => l.kind === "D" && l.round === kills.length), "the last run delivered what the kills left")
    const delivered = lines.filter((l) => l.kind === "D")
    assert.isAbove(enqueued.length, 0)
    const deliveredIds = new Set(delivered.map((l) => l.id))
    for (const e of enqueued) assert.isTrue(deliveredIds.has(e.id), `entry ${e.id} (seq ${e.seq}) was delivered`)

    const byRecipient = new Map<string, Array<Line>>()
    for (const d of delivered) {
      const list = byRecipient.get(d.to) ?? []
      list.push(d)
      byRecipient.set(d.to, list)
    }
    for (const [to, list] of byRecipient) {
      for (let i = 1; i < list.length; i++) {
        const prev = list[i - 1]
        const cur = list[i]
        if (cur.seq === prev.seq) {
          assert.isAbove(cur.round, prev.round, `${to}: seq ${cur.seq} delivered twice within one run`)
        } else {
          assert.isAbove(cur.seq, prev.seq, `${to}: seq ${cur.seq} delivered after seq ${prev.seq}`)
        }
      }
    }
  }, 60_000)
})
