/**
 * Before/after of the delivery log's append path in one process, rounds alternated, so both builds see
 * the same load (a shared machine's wall-clock figures move ±50 % between runs; this moves a few %):
 *
 *   git worktree add /tmp/log-before <commit> && ln -s "$PWD/node_modules" /tmp/log-before/node_modules
 *   node --expose-gc --import tsx bench/append-pair.ts /tmp/log-before .     # fsync "always", real disk
 *   APPEND_PAIR_IO=stub node --expose-gc --import tsx bench/append-pair.ts /tmp/log-before .
 *
 * 64 Effect fibers append (as `npm run bench -- delivery-log` does), each round a fresh log. With
 * `APPEND_PAIR_IO=stub`, `fs.write` and `fs.fdatasync` complete on the next turn without touching the
 * disk, and an inline write on a segment returns at once (`stubDurableWrites`): what is left is the log's
 * own CPU (JavaScript and GC), the steadiest figure on a busy machine.
 * `APPEND_PAIR_SQLITE=1` adds better-sqlite3 (WAL, FULL, a transaction per tick) as a contender, and
 * `APPEND_PAIR_FLOOR=1` the floor of this design: the same fibers, each append one `Effect.callback`
 * that copies a ready 270-byte record into a staging buffer, one `fs.write` + one `fs.fdatasync` per
 * batch, and nothing else (no check, no encoding, no state, no entry returned).
 * `APPEND_PAIR_WARM=<n>`: every producer first makes `n` appends that are not measured (CPU, time and
 * latency are taken from the moment the first producer is past them, to the end): a contender's code is
 * compiled again after the forced collection before each round (see bench/README.md, "Cold rounds").
 * Not a `.bench.ts` file: `npm run bench` does not run it (it needs a second tree).
 */
import Database from "better-sqlite3"
import { Effect, type Scope } from "effect"
import * as fs from "node:fs"
import { loadavg } from "node:os"
import { join, resolve } from "node:path"
import type { DeliveryLog as Log, OutboundMessage } from "../src/delivery/types.js"
import { gc, now, stubDurableWrites, tickBatcher } from "./lib.js"

if (process.env.APPEND_PAIR_IO === "stub") stubDurableWrites()

interface Opener {
  readonly open: (o: { dir: string }) => Effect.Effect<Log, unknown, Scope.Scope>
}

const trees = process.argv.slice(2).map((t) => resolve(t))
if (trees.length === 0) {
  console.error("usage: node --expose-gc --import tsx bench/append-pair.ts <tree> [<tree>...]")
  process.exit(2)
}
const logs = await Promise.all(
  trees.map(async (t) => ((await import(join(t, "src/delivery/index.ts"))) as { DeliveryLog: Opener }).DeliveryLog)
)
const root = join(process.cwd(), ".bench-tmp", "append-pair")
fs.rmSync(root, { recursive: true, force: true })
fs.mkdirSync(root, { recursive: true })

const PRODUCERS = 64
const PER = Number(process.env.APPEND_PAIR_PER ?? 400)
const ROUNDS = Number(process.env.APPEND_PAIR_ROUNDS ?? 8)
const WARM = Number(process.env.APPEND_PAIR_WARM ?? 0)
const TOTAL = WARM + PER
const message = (p: number, n: number): OutboundMessage => ({
  channel: "telegram",
  to: `chat-${p}`,
  body: { text: `reply ${n} from producer ${p}: ${"lorem ipsum ".repeat(8)}`, n }
})

interface Round {
  readonly rate: number
  readonly user: number
  readonly sys: number
  readonly p99: number
}

/** Called by a producer at each append `n`: at the first one past the warm-up, the measurement starts. */
let passed: (n: number) => void = () => {}

const measure = async (body: (lat: Array<number>) => Promise<void>): Promise<Round> => {
  const lat: Array<number> = []
  let c0 = process.cpuUsage()
  let t0 = now()
  let started = WARM === 0
  passed = (n) => {
    if (started || n < WARM) return
    started = true
    c0 = process.cpuUsage()
    t0 = now()
  }
  await body(lat)
  const c = process.cpuUsage(c0)
  const n = PRODUCERS * PER
  lat.sort((a, b) => a - b)
  return { rate: n / ((now() - t0) / 1000), user: c.user / n, sys: c.system / n, p99: lat[Math.floor(n * 0.99)]! }
}

let runs = 0
const ours = (DeliveryLog: Opener) => (lat: Array<number>) =>
  Effect.runPromise(
    Effect.scoped(
      Effect.gen(function*() {
        const log = yield* DeliveryLog.open({ dir: join(root, `log-${runs++}`) })
        yield* Effect.forEach(
          Array.from({ length: PRODUCERS }, (_, p) => p),
          (p) =>
            Effect.gen(function*() {
              for (let n = 0; n < TOTAL; n++) {
                passed(n)
                const t = now()
                yield* log.append(message(p, n))
                if (n >= WARM) lat.push(now() - t)
              }
            }),
          { concurrency: "unbounded", discard: true }
        )
      })
    )
  )

const sqlite = async (lat: Array<number>) => {
  const db = new Database(join(root, `sqlite-${runs++}.db`))
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = FULL")
  db.exec("CREATE TABLE outbox (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, enqueued_at INTEGER, message TEXT NOT NULL)")
  const add = tickBatcher(db)
  await Promise.all(Array.from({ length: PRODUCERS }, async (_, p) => {
    for (let n = 0; n < TOTAL; n++) {
      passed(n)
      const t = now()
      await add([`${p}-${n}`, Date.now(), JSON.stringify(message(p, n))])
      if (n >= WARM) lat.push(now() - t)
    }
  }))
  db.close()
}

/** The floor: group commit of ready-made records and nothing else. */
const bare = (lat: Array<number>) => {
  const fd = fs.openSync(join(root, `bare-${runs++}`), "w", 0o600)
  const record = Buffer.alloc(270, 0x61)
  let stage = Buffer.allocUnsafeSlow(1 << 20)
  let spare = Buffer.allocUnsafeSlow(1 << 20)
  let staged = 0
  let position = 0
  let waiting: Array<(e: Effect.Effect<void>) => void> = []
  let running = false
  const flush = (): void => {
    if (waiting.length === 0) {
      running = false
      return
    }
    const buf = stage
    const n = staged
    const done = waiting
    stage = spare
    spare = buf
    staged = 0
    waiting = []
    fs.write(fd, buf, 0, n, position, (err) => {
      if (err) throw err
      position += n
      fs.fdatasync(fd, (e) => {
        if (e) throw e
        for (const resume of done) resume(Effect.void)
        flush()
      })
    })
  }
  const append = (_m: OutboundMessage) =>
    Effect.callback<void>((resume) => {
      record.copy(stage, staged)
      staged += record.length
      waiting.push(resume)
      if (!running) {
        running = true
        setImmediate(flush)
      }
    })
  return Effect.runPromise(
    Effect.forEach(
      Array.from({ length: PRODUCERS }, (_, p) => p),
      (p) =>
        Effect.gen(function*() {
          for (let n = 0; n < TOTAL; n++) {
            passed(n)
            const t = now()
            yield* append(message(p, n))
            if (n >= WARM) lat.push(now() - t)
          }
        }),
      { concurrency: "unbounded", discard: true }
    )
  ).finally(() => fs.closeSync(fd))
}

const contenders: Array<[string, (lat: Array<number>) => Promise<void>]> = trees.map((t, i) => [t, ours(logs[i]!)])
if (process.env.APPEND_PAIR_SQLITE === "1") contenders.push(["better-sqlite3 (txn per tick)", sqlite])
if (process.env.APPEND_PAIR_FLOOR === "1") contenders.push(["floor: bare group commit of ready records", bare])
for (const [, run] of contenders) await measure(run) // warm-up, discarded
const results = contenders.map((): Array<Round> => [])
for (let r = 0; r < ROUNDS; r++) {
  for (let i = 0; i < contenders.length; i++) {
    gc()
    results[i]!.push(await measure(contenders[i]![1]))
  }
}
const med = (xs: ReadonlyArray<number>): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!
console.log(
  `${PRODUCERS} fibers x ${PER} appends${
    WARM > 0 ? ` (after ${WARM} unmeasured ones each)` : ""
  }, ${ROUNDS} alternated rounds, I/O ${
    process.env.APPEND_PAIR_IO === "stub" ? "stubbed" : "real (fsync always)"
  }, load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}`
)
console.log("| build | CPU µs/append (median) | user | sys | per round | appends/s (median) | p99 ms (median) |")
console.log("| --- | --- | --- | --- | --- | --- | --- |")
contenders.forEach(([name], i) => {
  const rs = results[i]!
  console.log(
    `| ${name} | ${med(rs.map((x) => x.user + x.sys)).toFixed(2)} | ${med(rs.map((x) => x.user)).toFixed(2)} | ${
      med(rs.map((x) => x.sys)).toFixed(2)
    } | ${rs.map((x) => (x.user + x.sys).toFixed(1)).join(" ")} | ${Math.round(med(rs.map((x) => x.rate)))} | ${
      med(rs.map((x) => x.p99)).toFixed(2)
    } |`
  )
})
fs.rmSync(root, { recursive: true, force: true })
