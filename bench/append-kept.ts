/**
 * The kept-open row (as `npm run bench -- delivery-log` measures it) with two or more trees in
 * one process, rounds alternated, so every build sees the same load:
 *
 *   git worktree add --detach /tmp/log-before <commit> && ln -s "$PWD/node_modules" /tmp/log-before/node_modules
 *   node --import tsx bench/append-kept.ts /tmp/log-before .            # fsync "always", real disk
 *   APPEND_KEPT_IO=stub node --import tsx bench/append-kept.ts /tmp/log-before .
 *
 * Each tree's log is opened once and warmed up; then `APPEND_KEPT_ROUNDS` (default 12) rounds of 64
 * Effect fibers x `APPEND_KEPT_PER` (default 400) appends each, the contenders' order reversed every
 * round, no forced collection; after each round, outside the measured time, every pending entry is
 * acked (as the bench's kept-open row does). CPU per append by thread from
 * `/proc/self/task/<tid>/schedstat` (Linux): the main thread, and all the others (the thread pool,
 * V8's collector helpers). `APPEND_KEPT_SQLITE=1` adds better-sqlite3 (WAL, FULL, a transaction per
 * tick, kept open too). With `APPEND_KEPT_IO=stub`, `fs.write`, `fs.writeSync` on the log's segments
 * and `fs.fdatasync` do not touch the disk (the callbacks run on the next turn): what is left is the
 * log's own CPU. A tree may carry options for its log as JSON after `@`, e.g.
 * `.@{"writes":"thread-pool"}` (the same tree may be given twice, with and without). Not a `.bench.ts` file: `npm run bench` does not run it (it needs a second tree).
 */
import Database from "better-sqlite3"
import { Effect, Exit, Scope } from "effect"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import { Session } from "node:inspector/promises"
import { loadavg } from "node:os"
import { join, resolve } from "node:path"
import type { DeliveryLog as Log, OutboundMessage } from "../src/delivery/types.js"
import { now, quiet, stubDurableWrites, tickBatcher } from "./lib.js"

const STUB = process.env.APPEND_KEPT_IO === "stub"
if (STUB) stubDurableWrites()

interface Opener {
  readonly open: (o: { dir: string }) => Effect.Effect<Log, unknown, Scope.Scope>
}

/** `<tree>` or `<tree>@<options as JSON>`. */
const args = process.argv.slice(2).map((a) => {
  const at = a.indexOf("@{")
  return at < 0 ? { tree: a, options: {} } : { tree: a.slice(0, at), options: JSON.parse(a.slice(at + 1)) as object }
})
const trees = args.map((a) => resolve(a.tree))
if (trees.length === 0) {
  console.error("usage: node --import tsx bench/append-kept.ts <tree> [<tree>...]")
  process.exit(2)
}
// `APPEND_KEPT_DIST=1`: each tree's built JavaScript (`npm run build`), so that profiles name lines.
const entry = process.env.APPEND_KEPT_DIST === "1" ? "dist/delivery/index.js" : "src/delivery/index.ts"
const openers = await Promise.all(
  trees.map(async (t) => ((await import(join(t, entry))) as { DeliveryLog: Opener }).DeliveryLog)
)
const root = join(process.cwd(), ".bench-tmp", "append-kept")
fs.rmSync(root, { recursive: true, force: true })
fs.mkdirSync(root, { recursive: true })

const PRODUCERS = 64
const PER = Number(process.env.APPEND_KEPT_PER ?? 400)
const ROUNDS = Number(process.env.APPEND_KEPT_ROUNDS ?? 12)
const message = (p: number, n: number): OutboundMessage => ({
  channel: "telegram",
  to: `chat-${p}`,
  body: { text: `reply ${n} from producer ${p}: ${"lorem ipsum ".repeat(8)}`, n }
})

/** CPU ns of each thread by id, from `/proc/self/task/<tid>/schedstat`. */
const perThread = (): Map<string, number> => {
  const out = new Map<string, number>()
  for (const t of fs.readdirSync("/proc/self/task")) {
    try {
      out.set(t, Number(fs.readFileSync(`/proc/self/task/${t}/schedstat`, "utf8").split(" ")[0]))
    } catch {
      // the thread ended meanwhile
    }
  }
  return out
}

/**
 * The thread pool's threads (Node 20 does not name them): the threads that ran during a burst of
 * `fs.promises.stat` calls, the main thread aside.
 */
const poolThreads = async (): Promise<Set<string>> => {
  const before = perThread()
  for (let i = 0; i < 400; i++) await fs.promises.stat(root)
  const after = perThread()
  const pool = new Set<string>()
  for (const [t, ns] of after) if (t !== String(process.pid) && ns - (before.get(t) ?? 0) > 0) pool.add(t)
  return pool
}
const pool = await poolThreads()

/**
 * CPU ns of the main thread and of all the others, from `/proc/self/task/<tid>/schedstat`; of the
 * others, the thread pool's (`poolThreads`): the rest are V8's (the collector's helpers, the compilers).
 */
const threadNs = (): { main: number; others: number; pool: number } => {
  let main = 0
  let others = 0
  let inPool = 0
  for (const t of fs.readdirSync("/proc/self/task")) {
    let ns: number
    try {
      ns = Number(fs.readFileSync(`/proc/self/task/${t}/schedstat`, "utf8").split(" ")[0])
    } catch {
      continue // the thread ended meanwhile
    }
    if (t === String(process.pid)) main += ns
    else {
      others += ns
      if (pool.has(t)) inPool += ns
    }
  }
  return { main, others, pool: inPool }
}

interface Round {
  readonly main: number
  readonly others: number
  /** Of `others`: the thread pool's. */
  readonly pool: number
  readonly rate: number
  readonly p99: number
  /** Minor page faults of the process per append (~6–12 µs of CPU each on the bench machine's VM). */
  readonly faults: number
}

interface Contender {
  readonly name: string
  readonly round: (lat: Array<number>) => Promise<void>
  readonly between: () => Promise<void>
}

const scope = Effect.runSync(Scope.make())
let dirs = 0

const ours = async (name: string, opener: Opener, options: object): Promise<Contender> => {
  const log = await Effect.runPromise(
    Scope.provide(scope)(opener.open({ ...options, dir: join(root, `log-${dirs++}`) }))
  )
  return {
    name,
    round: (lat) =>
      Effect.runPromise(
        Effect.forEach(
          Array.from({ length: PRODUCERS }, (_, p) => p),
          (p) =>
            Effect.gen(function*() {
              for (let n = 0; n < PER; n++) {
                const t = now()
                yield* log.append(message(p, n))
                lat.push(now() - t)
              }
            }),
          { concurrency: "unbounded", discard: true }
        )
      ),
    between: () =>
      Effect.runPromise(
        Effect.flatMap(
          log.pending,
          (entries) => Effect.forEach(entries, (e) => log.ack(e.id), { concurrency: PRODUCERS, discard: true })
        )
      )
  }
}

const sqlite = (): Contender => {
  const db = new Database(join(root, "sqlite.db"))
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = FULL")
  db.exec("CREATE TABLE outbox (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, enqueued_at INTEGER, message TEXT NOT NULL)")
  const add = tickBatcher(db)
  return {
    name: "better-sqlite3 (txn per tick)",
    round: async (lat) => {
      await Promise.all(Array.from({ length: PRODUCERS }, async (_, p) => {
        for (let n = 0; n < PER; n++) {
          const t = now()
          await add([randomUUID(), Date.now(), JSON.stringify(message(p, n))])
          lat.push(now() - t)
        }
      }))
    },
    between: async () => void db.exec("DELETE FROM outbox")
  }
}

/**
 * After the deliveries between rounds (and after the warm-up), wait outside the measured time until the
 * process is quiet (`quiet`): what the deliveries started in the background (the log's ack records, a
 * running checkpoint, a compaction, the collector's marking of the entries `pending` read) ends before
 * the next round instead of landing in whichever contender runs next; the peer's deletes run
 * synchronously in its `between`. `APPEND_KEPT_SETTLE=0`: no wait (as before session 15).
 */
const SETTLE = process.env.APPEND_KEPT_SETTLE !== "0"

const contenders: Array<Contender> = []
for (let i = 0; i < trees.length; i++) {
  const options = args[i]!.options
  const shown = Object.keys(options).length === 0 ? "" : ` ${JSON.stringify(options)}`
  contenders.push(await ours(`${i}: ${trees[i]}${shown}`, openers[i]!, options))
}
if (process.env.APPEND_KEPT_SQLITE === "1") contenders.push(sqlite())

const measure = async (c: Contender): Promise<Round> => {
  const lat: Array<number> = []
  const t0 = threadNs()
  const f0 = process.resourceUsage().minorPageFault
  const w0 = now()
  await c.round(lat)
  const wall = now() - w0
  const faults = process.resourceUsage().minorPageFault - f0
  const t1 = threadNs()
  const n = PRODUCERS * PER
  lat.sort((a, b) => a - b)
  return {
    main: (t1.main - t0.main) / 1000 / n,
    others: (t1.others - t0.others) / 1000 / n,
    pool: (t1.pool - t0.pool) / 1000 / n,
    rate: n / (wall / 1000),
    p99: lat[Math.floor(n * 0.99)]!,
    faults: faults / n
  }
}

// `APPEND_KEPT_PROFILE=<file>`: a CPU profile (`.cpuprofile`) of the first tree's measured rounds only;
// `APPEND_KEPT_HEAP=<file>`: a sampling heap profile (`.heapprofile`) of the same, every 512 bytes.
const session = process.env.APPEND_KEPT_PROFILE || process.env.APPEND_KEPT_HEAP ? new Session() : undefined
if (session !== undefined) {
  session.connect()
  if (process.env.APPEND_KEPT_PROFILE) {
    await session.post("Profiler.enable")
    await session.post("Profiler.setSamplingInterval", { interval: Number(process.env.APPEND_KEPT_INTERVAL ?? 100) })
  }
  if (process.env.APPEND_KEPT_HEAP) await session.post("HeapProfiler.enable")
}
const profiled = async <A>(f: () => Promise<A>): Promise<A> => {
  if (session === undefined) return f()
  if (process.env.APPEND_KEPT_PROFILE) await session.post("Profiler.start")
  if (process.env.APPEND_KEPT_HEAP) {
    await session.post("HeapProfiler.startSampling", {
      samplingInterval: 512,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true
    })
  }
  const a = await f()
  if (process.env.APPEND_KEPT_PROFILE) {
    const { profile } = await session.post("Profiler.stop")
    cpuProfiles.push(profile)
  }
  if (process.env.APPEND_KEPT_HEAP) {
    const { profile } = await session.post("HeapProfiler.stopSampling")
    heapProfiles.push(profile)
  }
  return a
}
const cpuProfiles: Array<unknown> = []
const heapProfiles: Array<unknown> = []

const started = new Date().toISOString().slice(11, 19)
const load0 = loadavg()[0]!.toFixed(2)
for (const c of contenders) {
  await c.round([])
  await c.between()
}
if (SETTLE) await quiet()
const results = contenders.map((): Array<Round> => [])
for (let r = 0; r < ROUNDS; r++) {
  const order = contenders.map((_, i) => i)
  if (r % 2 === 1) order.reverse()
  for (const i of order) {
    results[i]!.push(await (i === 0 ? profiled(() => measure(contenders[i]!)) : measure(contenders[i]!)))
  }
  for (const c of contenders) await c.between()
  if (SETTLE) await quiet()
}
await Effect.runPromise(Scope.close(scope, Exit.void))
// Every round's profile in one file each (the last round's; the others are kept as ...-<round>).
cpuProfiles.forEach((p, r) => fs.writeFileSync(`${process.env.APPEND_KEPT_PROFILE}-${r}.cpuprofile`, JSON.stringify(p)))
heapProfiles.forEach((p, r) => fs.writeFileSync(`${process.env.APPEND_KEPT_HEAP}-${r}.heapprofile`, JSON.stringify(p)))
// Every round has the same number of appends: the mean per round is the CPU of all rounds per append.
const mean = (xs: ReadonlyArray<number>): number => xs.reduce((a, b) => a + b, 0) / xs.length
const med = (xs: ReadonlyArray<number>): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!
console.log(
  `${PRODUCERS} fibers x ${PER} appends, kept open, ${ROUNDS} alternated rounds, I/O ${
    STUB ? "stubbed" : "real (fsync always)"
  }, ${started}-${new Date().toISOString().slice(11, 19)} UTC, load average ${load0} -> ${loadavg()[0]!.toFixed(2)}`
)
console.log(
  "| build | CPU µs/append (mean) | main | others (of which the thread pool) | median of rounds | per round (main + others) | appends/s (median) | p99 ms (median) | page faults/append |"
)
console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
contenders.forEach((c, i) => {
  const rs = results[i]!
  console.log(
    `| ${c.name} | ${mean(rs.map((x) => x.main + x.others)).toFixed(2)} | ${mean(rs.map((x) => x.main)).toFixed(2)} | ${
      mean(rs.map((x) => x.others)).toFixed(2)
    } (${mean(rs.map((x) => x.pool)).toFixed(2)}) | ${med(rs.map((x) => x.main + x.others)).toFixed(2)} | ${
      rs.map((x) => (x.main + x.others).toFixed(1)).join(" ")
    } | ${Math.round(med(rs.map((x) => x.rate)))} | ${med(rs.map((x) => x.p99)).toFixed(2)} | ${
      mean(rs.map((x) => x.faults)).toFixed(3)
    } |`
  )
})
fs.rmSync(root, { recursive: true, force: true })
