/**
 * DeliveryQueue: what does the queue cost on top of the log it drives? Side by side, same file log
 * settings, same number of entries and recipients, 64 concurrent producers:
 *   - floor: `append` then `ack` for every message (what any at-least-once sender must write), no queue;
 *   - DeliveryQueue: `enqueue` every message, `deliver` a no-op, until `idle` (replay-free steady state);
 *   - replay: a queue made on a log that already holds every entry pending (start-up after a crash).
 * With `fsync: "never"` (CPU cost) and `fsync: "always"` (group commit on the real disk). Beside each
 * rate, the process CPU time per entry from open to close (the close's CHECKPOINT included): on a
 * shared machine that is the figure to compare, wall-clock rates move with the load.
 * `npm run bench -- deliveryQueue`
 */
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DeliveryLog, DeliveryQueue } from "../src/delivery/index.js"
import type { OutboundMessage } from "../src/delivery/index.js"
import { now, ratio, table } from "./lib.js"

const root = mkdtempSync(join(tmpdir(), "switchyard-bench-dq-"))
let dirs = 0
const freshDir = () => join(root, `d${dirs++}`)

const messages = (n: number, recipients: number): Array<OutboundMessage> =>
  Array.from(
    { length: n },
    (_, i) => ({ channel: "bench", to: `r${i % recipients}`, body: { i, text: "hello there" } })
  )

type Fsync = "always" | "never"

/** A rate, and the process CPU time (µs per entry) `self` took from its start to its end. */
interface Measured {
  readonly rate: number
  readonly cpuUs: number
}
const withCpu = (entries: number, self: Effect.Effect<number, unknown>): Effect.Effect<Measured, unknown> =>
  Effect.suspend(() => {
    const c0 = process.cpuUsage()
    return Effect.map(self, (rate) => {
      const c = process.cpuUsage(c0)
      return { rate, cpuUs: (c.user + c.system) / entries }
    })
  })

/** Entries per second for append + ack of every message, no queue. */
const floor = (fsync: Fsync, msgs: ReadonlyArray<OutboundMessage>) =>
  withCpu(
    msgs.length,
    Effect.scoped(
      Effect.gen(function*() {
        const log = yield* DeliveryLog.open({ dir: freshDir(), fsync })
        const start = now()
        yield* Effect.forEach(msgs, (m) => Effect.flatMap(log.append(m), (e) => log.ack(e.id)), {
          concurrency: 64,
          discard: true
        })
        return (msgs.length * 1000) / (now() - start)
      })
    )
  )

/** Entries per second through the queue: enqueue all, deliver (no-op), until idle. */
const queued = (fsync: Fsync, msgs: ReadonlyArray<OutboundMessage>, concurrency: number) =>
  withCpu(
    msgs.length,
    Effect.scoped(
      Effect.gen(function*() {
        const log = yield* DeliveryLog.open({ dir: freshDir(), fsync })
        const q = yield* DeliveryQueue.make({ log, deliver: () => Effect.void, concurrency })
        const start = now()
        yield* Effect.forEach(msgs, q.enqueue, { concurrency: 64, discard: true })
        yield* q.idle
        const elapsed = now() - start
        const stats = yield* q.stats
        if (stats.delivered !== msgs.length) throw new Error(`delivered ${stats.delivered} of ${msgs.length}`)
        return (msgs.length * 1000) / elapsed
      })
    )
  )

/** Entries per second delivered by a new queue replaying a log that holds them all pending. */
const replay = (fsync: Fsync, msgs: ReadonlyArray<OutboundMessage>, concurrency: number) =>
  Effect.gen(function*() {
    const dir = freshDir()
    yield* Effect.scoped(
      Effect.gen(function*() {
        const log = yield* DeliveryLog.open({ dir, fsync: "never" })
        yield* Effect.forEach(msgs, log.append, { concurrency: 64, discard: true })
      })
    )
    return yield* withCpu(
      msgs.length,
      Effect.scoped(
        Effect.gen(function*() {
          const start = now()
          const log = yield* DeliveryLog.open({ dir, fsync })
          const q = yield* DeliveryQueue.make({ log, deliver: () => Effect.void, concurrency })
          yield* q.idle
          const elapsed = now() - start
          if ((yield* q.stats).delivered !== msgs.length) {
            throw new Error("replay did not deliver everything")
          }
          return (msgs.length * 1000) / elapsed
        })
      )
    )
  })

/** The best rate and the least CPU of `runs` runs. */
const best = async (runs: number, f: () => Effect.Effect<Measured, unknown>): Promise<Measured> => {
  let rate = 0
  let cpuUs = Number.POSITIVE_INFINITY
  for (let i = 0; i < runs; i++) {
    const m = await Effect.runPromise(f())
    rate = Math.max(rate, m.rate)
    cpuUs = Math.min(cpuUs, m.cpuUs)
  }
  return { rate, cpuUs }
}

const main = async () => {
  const rows = []
  for (const [fsync, n] of [["never", 20_000], ["always", 4_000]] as const) {
    const msgs = messages(n, 200)
    const f = await best(3, () => floor(fsync, msgs))
    for (const concurrency of [8, 64]) {
      const q = await best(3, () => queued(fsync, msgs, concurrency))
      const r = await best(3, () => replay(fsync, msgs, concurrency))
      rows.push({
        name: `fsync ${fsync}, ${n.toLocaleString("en-US")} entries, 200 recipients, concurrency ${concurrency}`,
        "append+ack floor (entries/s)": f.rate,
        "DeliveryQueue (entries/s)": q.rate,
        "queue / floor": ratio(q.rate, f.rate),
        "replay on start (entries/s)": r.rate,
        "replay / floor": ratio(r.rate, f.rate),
        "floor CPU µs/entry": f.cpuUs,
        "queue CPU µs/entry": q.cpuUs,
        "replay CPU µs/entry": r.cpuUs
      })
    }
  }
  table("DeliveryQueue throughput against the log's own append + ack floor (64 producers, deliver a no-op)", rows)
}

main().then(
  () => rmSync(root, { recursive: true, force: true }),
  (error) => {
    rmSync(root, { recursive: true, force: true })
    console.error(error)
    process.exitCode = 1
  }
)
