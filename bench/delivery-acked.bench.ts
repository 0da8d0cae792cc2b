/**
 * `npm run bench -- delivery-acked`: what the log holds for ids acked inside the dedupe window
 * (default 24 h). 1M entries appended and acked, with idempotency keys like the agent's
 * (`reply:session-N:turn-M`) and without keys; the heap the open log keeps for them, and the time to
 * open it again (from the CHECKPOINT a clean close writes; and once without it, as after a crash, when
 * recovery replays the snapshot and segments). Issue 12's goals: with keys <= 60 MB and reopen <= 0.5 s,
 * without keys <= 30 MB and reopen <= 0.5 s. `BENCH_ACKED=200000` for a shorter run.
 *
 * Heap: `heapUsed` after a forced full GC, minus the same reading before the log was opened; the
 * `ArrayBuffer` memory (typed arrays live outside the V8 heap) is shown beside it and counted in the
 * total that is held against the goal.
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import { loadavg } from "node:os"
import { join } from "node:path"
import { DeliveryLog } from "../src/delivery/index.js"
import { gc, now, table } from "./lib.js"

const N = Number(process.env.BENCH_ACKED ?? 1_000_000)
const BATCH = 1_000
const root = join(process.cwd(), ".bench-tmp", "delivery-acked")
fs.rmSync(root, { recursive: true, force: true })
fs.mkdirSync(root, { recursive: true })

const message = (n: number, keyed: boolean) => ({
  channel: "telegram",
  to: `chat-${n % 64}`,
  body: { text: `reply ${n}: ${"lorem ipsum ".repeat(8)}` },
  ...(keyed ? { idempotencyKey: `reply:session-${n % 5_000}:turn-${n}` } : {})
})

const memory = () => {
  gc()
  const m = process.memoryUsage()
  return { heap: m.heapUsed, buffers: m.arrayBuffers }
}

const MB = 1024 * 1024

const run = async (keyed: boolean) => {
  const dir = join(root, keyed ? "keyed" : "plain")
  const base = memory()
  const t0 = now()
  let closeFrom = process.cpuUsage()
  const held = await Effect.runPromise(
    Effect.scoped(
      Effect.gen(function*() {
        const log = yield* DeliveryLog.open({ dir, fsync: "never" })
        for (let i = 0; i < N; i += BATCH) {
          const entries = yield* Effect.forEach(
            Array.from({ length: Math.min(BATCH, N - i) }, (_, j) => i + j),
            (n) => log.append(message(n, keyed)),
            { concurrency: "unbounded" }
          )
          yield* Effect.forEach(entries, (e) => log.ack(e.id), { concurrency: "unbounded", discard: true })
        }
        const s = yield* log.stats
        if (s.pending !== 0) throw new Error(`pending ${s.pending}`)
        const m = memory()
        closeFrom = process.cpuUsage()
        return { heap: m.heap - base.heap, buffers: m.buffers - base.buffers, segments: s.segments, bytes: s.bytes }
      })
    )
  )
  // Closing writes the CHECKPOINT: the bytes written since open are read back once for their CRC-32.
  const closed = process.cpuUsage(closeFrom)
  const closeCpuMs = (closed.user + closed.system) / 1000
  const fillSeconds = (now() - t0) / 1000
  // Reopen (best of 3): from the CHECKPOINT the close wrote; then once without it (as after a crash),
  // where recovery replays the snapshot and segments.
  let best = Number.POSITIVE_INFINITY
  let bestCpu = 0
  let replayCpu = 0
  let after = { heap: 0, buffers: 0 }
  for (let r = 0; r < 4; r++) {
    const crashed = r === 3
    if (crashed) fs.rmSync(join(dir, "CHECKPOINT"), { force: true })
    gc()
    const reopenBase = memory()
    const c0 = process.cpuUsage()
    const t = now()
    const m = await Effect.runPromise(
      Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, fsync: "never" })
          const ms = now() - t
          const c = process.cpuUsage(c0)
          const mem = memory()
          // Still deduplicated after the reopen: a key (or id) from the middle of the run.
          const mid = Math.floor(N / 2)
          if (keyed) {
            const again = yield* log.append(message(mid, true))
            if (again.seq !== mid + 1) throw new Error(`the key of entry ${mid + 1} gave seq ${again.seq}`)
          }
          const s = yield* log.stats
          if (s.pending !== 0) throw new Error(`pending ${s.pending} after reopen`)
          return {
            ms,
            cpu: (c.user + c.system) / 1000,
            heap: mem.heap - reopenBase.heap,
            buffers: mem.buffers - reopenBase.buffers
          }
        })
      )
    )
    if (crashed) replayCpu = m.cpu
    else if (m.ms < best) {
      best = m.ms
      bestCpu = m.cpu
    }
    if (!crashed) after = { heap: m.heap, buffers: m.buffers }
  }
  return { held, after, reopenMs: best, reopenCpuMs: bestCpu, replayCpuMs: replayCpu, closeCpuMs, fillSeconds }
}

const main = async () => {
  const rows = []
  for (const keyed of [true, false]) {
    const r = await run(keyed)
    const goalMB = keyed ? 60 : 30
    const total = (r.held.heap + r.held.buffers) / MB
    rows.push({
      name: keyed ? "with idempotency keys (reply:session-N:turn-M)" : "without idempotency keys",
      "heap MB": r.held.heap / MB,
      "ArrayBuffer MB": r.held.buffers / MB,
      "total MB (goal)": `${total.toFixed(1)} (<= ${goalMB})`,
      "bytes/acked": (r.held.heap + r.held.buffers) / N,
      "after reopen MB": (r.after.heap + r.after.buffers) / MB,
      "reopen ms (goal <= 500)": r.reopenMs,
      "reopen CPU ms": r.reopenCpuMs,
      "reopen CPU ms, no checkpoint (after a crash)": r.replayCpuMs,
      "close CPU ms (checkpoint)": r.closeCpuMs,
      "log MB on disk": r.held.bytes / 1e6,
      segments: r.held.segments,
      "append+ack /s": (2 * N) / r.fillSeconds
    })
    fs.rmSync(join(root, keyed ? "keyed" : "plain"), { recursive: true, force: true })
  }
  table(`${N.toLocaleString("en-US")} entries appended and acked inside the dedupe window (fsync "never")`, rows)
  console.log(`load average: ${loadavg().map((l) => l.toFixed(2)).join(" ")} (2 cores)`)
  fs.rmSync(root, { recursive: true, force: true })
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
