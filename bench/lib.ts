/** Small helpers shared by the benchmarks: timing, heap readings, side-by-side tables, a free port, the sqlite peer. */
import type Database from "better-sqlite3"
import * as fs from "node:fs"
import fsModule from "node:fs"
import { syncBuiltinESMExports } from "node:module"
import * as net from "node:net"

export const now = (): number => performance.now()

/** Force a full collection (node runs with --expose-gc under `npm run bench`). */
export const gc = (): void => {
  const g = (globalThis as { gc?: () => void }).gc
  if (g) {
    g()
    g()
  }
}

export const heapUsed = (): number => {
  gc()
  return process.memoryUsage().heapUsed
}

export interface Row {
  readonly name: string
  readonly [column: string]: string | number
}

const fmt = (v: string | number): string =>
  typeof v === "number"
    ? Math.abs(v) >= 100
      ? Math.round(v).toLocaleString("en-US")
      : v.toFixed(2)
    : v

/** Print a Markdown table, so the output can be pasted into bench/README.md as it is. */
export const table = (title: string, rows: ReadonlyArray<Row>): void => {
  if (rows.length === 0) return
  const columns = Object.keys(rows[0]!)
  const lines = [
    `### ${title}`,
    "",
    `| ${columns.join(" | ")} |`,
    `| ${columns.map(() => "---").join(" | ")} |`,
    ...rows.map((r) => `| ${columns.map((c) => fmt(r[c] ?? "")).join(" | ")} |`),
    ""
  ]
  console.log(lines.join("\n"))
}

/** `a / b` as `"2.31x"`. */
export const ratio = (a: number, b: number): string => `${(a / b).toFixed(2)}x`

/** Run `fn` for at least `minMs` (after one warm-up run) and return operations per second. */
export const opsPerSecond = async (ops: number, fn: () => Promise<void> | void, minMs = 500): Promise<number> => {
  await fn()
  let runs = 0
  const start = now()
  let elapsed: number
  do {
    await fn()
    runs++
    elapsed = now() - start
  } while (elapsed < minMs)
  return (ops * runs * 1000) / elapsed
}

/**
 * better-sqlite3 with group commit by hand (the delivery log's peer): every outbox row inserted in one
 * tick goes in one transaction, run on the next macrotask; the row's promise resolves once it committed.
 */
export const tickBatcher = (db: Database.Database) => {
  const insert = db.prepare("INSERT INTO outbox (id, enqueued_at, message) VALUES (?, ?, ?)")
  let batch: Array<{ row: [string, number, string]; done: () => void }> = []
  const many = db.transaction((rows: typeof batch) => {
    for (const r of rows) insert.run(...r.row)
  })
  return (row: [string, number, string]): Promise<void> =>
    new Promise<void>((done) => {
      if (batch.length === 0) {
        setImmediate(() => {
          const rows = batch
          batch = []
          many(rows)
          for (const x of rows) x.done()
        })
      }
      batch.push({ row, done })
    })
}

/** CPU ns of every thread of this process together, from `/proc/self/task/<tid>/schedstat` (Linux; 0 elsewhere). */
const processThreadsNs = (): number => {
  let ns = 0
  try {
    for (const t of fs.readdirSync("/proc/self/task")) {
      try {
        ns += Number(fs.readFileSync(`/proc/self/task/${t}/schedstat`, "utf8").split(" ")[0])
      } catch {
        // the thread ended meanwhile
      }
    }
  } catch {
    return 0
  }
  return ns
}

/**
 * Wait until the process is quiet: all its threads together busy < 5 % of a core over 20 ms (at most
 * `maxMs`). Between measured rounds, so that background work the last step started (a log's ack records,
 * a running checkpoint, a compaction, the collector's marking of what it read) ends before the next
 * round instead of landing in whichever contender runs next.
 */
export const quiet = async (maxMs = 3000): Promise<void> => {
  const end = now() + maxMs
  while (now() < end) {
    const c0 = processThreadsNs()
    const t0 = now()
    await new Promise((r) => setTimeout(r, 20))
    if ((processThreadsNs() - c0) / 1e6 / (now() - t0) < 0.05) return
  }
}

/** A TCP port free on 127.0.0.1 right now (for a child process to listen on). */
export const freePort = (): Promise<number> =>
  new Promise((resolve) => {
    const s = net.createServer()
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as net.AddressInfo).port
      s.close(() => resolve(port))
    })
  })

/**
 * Make the log's durable writes touch no disk (a before/after driver's `…_IO=stub`): `fs.write` and
 * `fs.fdatasync` complete on the next turn, and `fs.writeSync` on a descriptor opened with `O_DSYNC` (a
 * segment's inline write) returns at once; what is left is the log's own CPU. Call it before the log's
 * modules are imported.
 */
export const stubDurableWrites = (): void => {
  const dsync = new Set<number>()
  const realOpenSync = fsModule.openSync
  fsModule.openSync = ((path: fs.PathLike, flags?: fs.OpenMode, mode?: fs.Mode) => {
    const fd = realOpenSync(path, flags ?? "r", mode)
    if (typeof flags === "number" && (flags & fs.constants.O_DSYNC) !== 0) dsync.add(fd)
    else dsync.delete(fd)
    return fd
  }) as typeof fsModule.openSync
  fsModule.write = ((...args: Array<unknown>) => {
    const cb = args[args.length - 1] as (err: null, n: number) => void
    const length = args[3] as number
    setImmediate(() => cb(null, length))
  }) as unknown as typeof fsModule.write
  const realWriteSync = fsModule.writeSync as unknown as (...args: Array<unknown>) => number
  fsModule.writeSync = ((...args: Array<unknown>) => {
    if (!dsync.has(args[0] as number)) return realWriteSync(...args)
    return args[3] as number
  }) as unknown as typeof fsModule.writeSync
  fsModule.fdatasync = ((_fd: number, cb: (err: null) => void) => {
    setImmediate(() => cb(null))
  }) as typeof fsModule.fdatasync
  syncBuiltinESMExports()
}
