/**
 * The cost of the run-time lane controls on dispatch: Promise-API dispatch + await of synchronous
 * no-op tasks over 1_000 keys, concurrent 4, in a plain lane, side by side with the same lane in a
 * capacity group (budget 4, shared with an idle lane), and with priorities (1 dispatch in 10 with
 * priority 1, or every one with a priority from 0 to 3: then each start ranks the lane's waiting
 * keys). Rates and CPU µs per task (`process.cpuUsage`, lowest round), each against the plain lane
 * of the same run. `npm run bench -- lane-controls`
 */
import { Deferred, Effect, Exit, References } from "effect"
import { CommandQueue, createCommandQueue } from "../src/queue/index.js"
import type { AsyncDispatchOptions, CommandQueueOptions, WaitInfo } from "../src/queue/index.js"
import { opsPerSecond, ratio, table } from "./lib.js"

const BATCH = 10_000
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const MIN_MS = Number(process.env.BENCH_MS ?? 1_000)
const noop = (i: number) => i

const lanes = { bench: { concurrent: 4, queued: BATCH }, other: { concurrent: 4, queued: 8 } }

const variant =
  (keys: number, options: CommandQueueOptions, priorityOf: (i: number) => number | undefined) => async () => {
    const q = await createCommandQueue(options)
    const names = Array.from({ length: keys }, (_, i) => `key-${i}`)
    const opts = Array.from({ length: 4 }, (_, p): AsyncDispatchOptions => ({ priority: p }))
    return {
      run: () => {
        const all: Array<Promise<unknown>> = []
        for (let i = 0; i < BATCH; i++) {
          const p = priorityOf(i)
          const task = () => noop(i)
          all.push(q.dispatch("bench", names[i % keys]!, task, p === undefined ? undefined : opts[p]).result)
        }
        return Promise.all(all).then(() => undefined)
      },
      close: () => q.close()
    }
  }

const none = () => undefined
const grouped: CommandQueueOptions = { lanes, groups: { g: { concurrent: 4, lanes: ["bench", "other"] } } }

const rows: ReadonlyArray<readonly [string, () => Promise<{ run: () => Promise<void>; close: () => Promise<void> }>]> =
  [
    ["plain lane (no option used), 1_000 keys", variant(1_000, { lanes }, none)],
    ["lane in a capacity group, 1_000 keys", variant(1_000, grouped, none)],
    [
      "priorities: 1 dispatch in 10 has priority 1, 1_000 keys",
      variant(1_000, { lanes }, (i) => (i % 10 === 0 ? 1 : undefined))
    ],
    ["priorities: every dispatch 0..3, 1_000 keys", variant(1_000, { lanes }, (i) => i % 4)],
    ["plain lane (no option used), 100 keys", variant(100, { lanes }, none)],
    ["priorities: every dispatch 0..3, 100 keys", variant(100, { lanes }, (i) => i % 4)]
  ]

const ONLY = process.env.BENCH_ONLY

const best = new Map<string, number>()
const cpu = new Map<string, number>()
for (let round = 0; round < (ONLY === "onwait" ? 0 : ROUNDS); round++) {
  for (const [name, make] of rows) {
    const v = await make()
    await v.run() // warm-up, outside the CPU reading
    const c0 = process.cpuUsage()
    let tasks = 0
    const ops = await opsPerSecond(BATCH, () => {
      tasks += BATCH
      return v.run()
    }, MIN_MS)
    const c = process.cpuUsage(c0)
    await v.close()
    best.set(name, Math.max(best.get(name) ?? 0, ops))
    // CPU of the whole process per task, lowest round: steadier than the rate on a shared machine
    cpu.set(name, Math.min(cpu.get(name) ?? Number.POSITIVE_INFINITY, (c.user + c.system) / tasks))
  }
}
const base1000 = best.get(rows[0]![0])!
const base100 = best.get(rows[4]![0])!
const cpu1000 = cpu.get(rows[0]![0])!
const cpu100 = cpu.get(rows[4]![0])!
if (ONLY !== "onwait") {
  table(
    `Promise API dispatch + await, synchronous no-op tasks, batches of ${
      BATCH.toLocaleString("en-US")
    }, concurrent 4, best of ${ROUNDS} rounds`,
    rows.map(([name], i) => ({
      name,
      "tasks/s": best.get(name)!,
      "vs plain lane": ratio(best.get(name)!, i >= 4 ? base100 : base1000),
      "CPU µs/task": cpu.get(name)!,
      "CPU vs plain lane": ratio(cpu.get(name)!, i >= 4 ? cpu100 : cpu1000)
    }))
  )
}

/**
 * One batch in a paused lane: `keys × perKey` tasks (priority `priorityOf(i)`), every one reported
 * by `onWait` while it waits (when `watched`), then the lane resumes and the batch is awaited.
 * Effect API, logs off: the `warnAfterMs` warning line per task would cost more than the rest.
 */
const watchedBatch = (keys: number, perKey: number, watched: boolean, priorityOf: (i: number) => number) =>
  Effect.gen(function*() {
    const n = keys * perKey
    let reported = 0
    const allReported = yield* Deferred.make<void>()
    const onWait = (info: WaitInfo) => {
      // the start's report comes with 0 as well: only the reports while waiting are counted
      if (info.queuedAhead >= 0 && ++reported === n) Deferred.doneUnsafe(allReported, Exit.void)
    }
    const c0 = process.cpuUsage()
    const q = yield* CommandQueue.make({
      lanes: { watch: { concurrent: 4, queued: n, ...(watched ? { warnAfterMs: 1 } : {}) } },
      ...(watched ? { onWait } : {})
    })
    const names = Array.from({ length: keys }, (_, i) => `key-${i}`)
    const opts = Array.from({ length: 4 }, (_, p) => ({ priority: p }))
    yield* q.pause("watch")
    const futures = []
    for (let i = 0; i < n; i++) {
      const p = priorityOf(i)
      futures.push(
        yield* q.dispatch("watch", names[i % keys]!, Effect.sync(() => noop(i)), p === 0 ? undefined : opts[p])
      )
    }
    if (watched) yield* Deferred.await(allReported)
    yield* q.resume("watch")
    for (const f of futures) yield* f.await
    const c = process.cpuUsage(c0)
    return (c.user + c.system) / n
  }).pipe(Effect.scoped, Effect.provideService(References.MinimumLogLevel, "None"), Effect.runPromise)

const zero = () => 0
const watchRows: ReadonlyArray<readonly [string, number, number, (i: number) => number]> = [
  ["1,000 keys waiting, 1 task each", 1_000, 1, zero],
  ["200 keys waiting, 5 tasks each", 200, 5, zero],
  ["1,000 keys waiting, 1 task each, priorities 0..3", 1_000, 1, (i) => i % 4]
]
const watchCpu = new Map<string, { on: number; off: number }>()
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, keys, perKey, priorityOf] of watchRows) {
    await watchedBatch(keys, perKey, true, priorityOf) // warm-up
    for (let rep = 0; rep < 5; rep++) {
      const on = await watchedBatch(keys, perKey, true, priorityOf)
      const off = await watchedBatch(keys, perKey, false, priorityOf)
      const prev = watchCpu.get(name)
      watchCpu.set(name, { on: Math.min(prev?.on ?? Infinity, on), off: Math.min(prev?.off ?? Infinity, off) })
    }
  }
}
table(
  `onWait with many keys waiting: a paused lane (concurrent 4, warnAfterMs 1), every task reported while it waits, then resumed; CPU µs per task, lowest of ${ROUNDS} × 5 batches`,
  watchRows.map(([name]) => {
    const { off, on } = watchCpu.get(name)!
    return { name, "CPU µs/task, onWait": on, "CPU µs/task, no onWait": off, "onWait vs none": ratio(on, off) }
  })
)
