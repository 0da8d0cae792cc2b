/**
 * The "attempt started" mark (`maybeSent`): what does writing it before every `deliver` cost? The same
 * queue over the same file log, 64 concurrent producers, 200 recipients, `deliver` a no-op, with the
 * mark (the file log as it is) and without it (the same log with `markStarted` removed: the queue then
 * skips the mark). Counted: fdatasync calls per delivered message (every `fs.fdatasync`/`fs.fsync` the
 * process makes), records per sync, CPU per message (`process.cpuUsage`), messages per second. Runs
 * alternate without/with, best of each kept for the rates and the median for the counts.
 * `npm run bench -- deliveryMark`
 */
import { Effect } from "effect"
import fs, { mkdtempSync, rmSync } from "node:fs"
import { syncBuiltinESMExports } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DeliveryLog, DeliveryQueue } from "../src/delivery/index.js"
import type { OutboundMessage } from "../src/delivery/index.js"
import { now, ratio, table } from "./lib.js"

// Count every sync the process makes (the log calls them through the `node:fs` namespace).
let syncs = 0
const realFdatasync = fs.fdatasync
const realFsync = fs.fsync
const realFsyncSync = fs.fsyncSync
fs.fdatasync = ((fd: number, cb: (err: NodeJS.ErrnoException | null) => void) => {
  syncs++
  return realFdatasync(fd, cb)
}) as typeof fs.fdatasync
fs.fsync = ((fd: number, cb: (err: NodeJS.ErrnoException | null) => void) => {
  syncs++
  return realFsync(fd, cb)
}) as typeof fs.fsync
fs.fsyncSync = ((fd: number) => {
  syncs++
  return realFsyncSync(fd)
}) as typeof fs.fsyncSync
syncBuiltinESMExports()

const root = mkdtempSync(join(tmpdir(), "switchyard-bench-mark-"))
let dirs = 0

type Fsync = "always" | "never"

interface Sample {
  readonly perSecond: number
  readonly syncsPerMessage: number
  readonly cpuUsPerMessage: number
}

const messages = (n: number): Array<OutboundMessage> =>
  Array.from({ length: n }, (_, i) => ({ channel: "bench", to: `r${i % 200}`, body: { i, text: "hello there" } }))

const once = (fsync: Fsync, mark: boolean, msgs: ReadonlyArray<OutboundMessage>, concurrency: number) =>
  Effect.scoped(
    Effect.gen(function*() {
      const opened = yield* DeliveryLog.open({ dir: join(root, `d${dirs++}`), fsync })
      const { markStarted, ...withoutMark } = opened
      if (mark && markStarted === undefined) throw new Error("the file log has no markStarted")
      const log: DeliveryLog.DeliveryLog = mark ? opened : withoutMark
      const q = yield* DeliveryQueue.make({ log, deliver: () => Effect.void, concurrency })
      const syncs0 = syncs
      const cpu0 = process.cpuUsage()
      const start = now()
      yield* Effect.forEach(msgs, q.enqueue, { concurrency: 64, discard: true })
      yield* q.idle
      const elapsed = now() - start
      const cpu = process.cpuUsage(cpu0)
      const delivered = (yield* q.stats).delivered
      if (delivered !== msgs.length) throw new Error(`delivered ${delivered} of ${msgs.length}`)
      return {
        perSecond: (msgs.length * 1000) / elapsed,
        syncsPerMessage: (syncs - syncs0) / msgs.length,
        cpuUsPerMessage: (cpu.user + cpu.system) / msgs.length
      } satisfies Sample
    })
  )

const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

const main = async () => {
  const rows = []
  for (const [fsync, n, concurrency] of [["always", 4_000, 64], ["always", 4_000, 8], ["never", 20_000, 64]] as const) {
    const msgs = messages(n)
    const runs: Record<"off" | "on", Array<Sample>> = { off: [], on: [] }
    await Effect.runPromise(once(fsync, false, msgs, concurrency)) // warm-up
    for (let i = 0; i < 5; i++) {
      runs.off.push(await Effect.runPromise(once(fsync, false, msgs, concurrency)))
      runs.on.push(await Effect.runPromise(once(fsync, true, msgs, concurrency)))
    }
    const sum = (s: ReadonlyArray<Sample>) => ({
      perSecond: Math.max(...s.map((x) => x.perSecond)),
      syncs: median(s.map((x) => x.syncsPerMessage)),
      cpu: median(s.map((x) => x.cpuUsPerMessage))
    })
    const off = sum(runs.off)
    const on = sum(runs.on)
    const records = (
      mark: boolean,
      syncsPerMessage: number
    ) => (syncsPerMessage === 0 ? "-" : ((mark ? 3 : 2) / syncsPerMessage).toFixed(1))
    for (const [name, s, mark] of [["without the mark", off, false], ["with the mark", on, true]] as const) {
      rows.push({
        name: `fsync ${fsync}, ${n.toLocaleString("en-US")} messages, queue concurrency ${concurrency}: ${name}`,
        "messages/s (best of 5)": s.perSecond,
        "fdatasyncs/message (median)": s.syncs.toFixed(3),
        "records/sync": records(mark, s.syncs),
        "CPU µs/message (median)": s.cpu,
        "CPU vs without": ratio(s.cpu, off.cpu)
      })
    }
  }
  table(
    "The attempt-started mark: syncs and CPU per delivered message (64 producers, 200 recipients, deliver a no-op)",
    rows
  )
}

main().then(
  () => rmSync(root, { recursive: true, force: true }),
  (error) => {
    rmSync(root, { recursive: true, force: true })
    console.error(error)
    process.exitCode = 1
  }
)
