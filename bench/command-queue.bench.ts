/**
 * CommandQueue: (1) dispatch + await of no-op tasks over 1_000 keys, concurrency 4, through the
 * Promise API and the Effect API, side by side with p-queue 10 and fastq (concurrency 4), with
 * synchronous tasks (the issue's goal) and again with asynchronous ones (an `async` function, or
 * `Effect.promise` for the Effect API: every task waits for a promise, as real work does);
 * (2) heap bytes retained per waiting task, beside p-queue; (3) and (4), issue 12's rows as its
 * harness measured them: 200k asynchronous tasks with 8,000 in flight over `k${i % 1000}`, and the heap
 * per waiting task with 9,000 distinct keys and the returned future held.
 * `npm run bench -- command-queue` (only (3) and (4): `BENCH_ONLY=issue12 npm run bench -- command-queue`;
 * only the throughput tables of (1): `BENCH_ONLY=throughput`)
 */
import { Effect, Exit, Scope } from "effect"
import fastq from "fastq"
import { loadavg } from "node:os"
import PQueue from "p-queue"
import { CommandQueue, createCommandQueue } from "../src/queue/index.js"
import type { AsyncFuture } from "../src/queue/index.js"
import { heapUsed, now, opsPerSecond, ratio, table } from "./lib.js"

const BATCH = 10_000 // at most `concurrent + queued` tasks may be owned at once: 4 + 10_000
const KEYS = 1_000
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const MIN_MS = Number(process.env.BENCH_MS ?? 1_000)

const noop = (i: number) => i

// ---------------------------------------------------------------------------------------------
// (1) throughput

const asyncNoop = async (i: number) => i

const pQueueRun = (async_: boolean) => async () => {
  const q = new PQueue({ concurrency: 4 })
  const task = async_ ? asyncNoop : noop
  return () => {
    const all: Array<Promise<unknown>> = []
    for (let i = 0; i < BATCH; i++) all.push(q.add(() => task(i)))
    return Promise.all(all).then(() => undefined)
  }
}

const fastqRun = (async_: boolean) => async () => {
  const q = async_ ? fastq.promise(asyncNoop, 4) : fastq.promise((i: number) => Promise.resolve(noop(i)), 4)
  return () => {
    const all: Array<Promise<unknown>> = []
    for (let i = 0; i < BATCH; i++) all.push(q.push(i))
    return Promise.all(all).then(() => undefined)
  }
}

const lanes = { bench: { concurrent: 4, queued: BATCH } }

const promiseApiRun = (async_: boolean) => async () => {
  const q = await createCommandQueue({ lanes })
  const keys = Array.from({ length: KEYS }, (_, i) => `key-${i}`)
  const task = async_ ? asyncNoop : noop
  return () => {
    const all: Array<Promise<unknown>> = []
    for (let i = 0; i < BATCH; i++) all.push(q.dispatch("bench", keys[i % KEYS]!, () => task(i)).result)
    return Promise.all(all).then(() => undefined)
  }
}

const effectApiRun = (async_: boolean) => async () => {
  const scope = Scope.makeUnsafe()
  const q = await Effect.runPromise(Scope.provide(scope)(CommandQueue.make({ lanes })))
  const keys = Array.from({ length: KEYS }, (_, i) => `key-${i}`)
  const task = async_ ? (i: number) => Effect.promise(() => asyncNoop(i)) : (i: number) => Effect.sync(() => noop(i))
  const batch = Effect.gen(function*() {
    const futures: Array<CommandQueue.Future<number, never>> = []
    for (let i = 0; i < BATCH; i++) futures.push(yield* q.dispatch("bench", keys[i % KEYS]!, task(i)))
    for (const f of futures) yield* f.await
  })
  return () => Effect.runPromise(batch)
}

const throughput = async (async_: boolean) => {
  const peers: ReadonlyArray<readonly [string, () => Promise<() => Promise<void>>]> = [
    ["p-queue 10 (concurrency 4)", pQueueRun(async_)],
    ["fastq (concurrency 4)", fastqRun(async_)],
    ["switchyard Promise API (1_000 keys, concurrent 4)", promiseApiRun(async_)],
    ["switchyard Effect API (1_000 keys, concurrent 4)", effectApiRun(async_)]
  ]
  const best = new Map<string, number>()
  const cpu = new Map<string, number>()
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, make] of peers) {
      const fn = await make()
      await fn() // warm-up, outside the CPU reading
      const c0 = process.cpuUsage()
      let tasks = 0
      const ops = await opsPerSecond(BATCH, () => {
        tasks += BATCH
        return fn()
      }, MIN_MS)
      const c = process.cpuUsage(c0)
      best.set(name, Math.max(best.get(name) ?? 0, ops))
      // CPU of the whole process (this thread and V8's helper threads) per task, lowest round
      cpu.set(name, Math.min(cpu.get(name) ?? Number.POSITIVE_INFINITY, (c.user + c.system) / tasks))
    }
  }
  const pq = best.get(peers[0]![0])!
  const kind = async_ ? "asynchronous (async function / Effect.promise)" : "synchronous"
  table(
    `dispatch + await of ${kind} no-op tasks, batches of ${BATCH.toLocaleString("en-US")}, best of ${ROUNDS} rounds`,
    peers.map(([name]) => ({
      name,
      "tasks/s": best.get(name)!,
      "vs p-queue": ratio(best.get(name)!, pq),
      "CPU µs/task": cpu.get(name)!
    }))
  )
}

// ---------------------------------------------------------------------------------------------
// (2) bytes retained per waiting task

const WAITING = 100_000
const LANES = 10 // each lane holds at most 10_000 waiting tasks

const retainedPQueue = async () => {
  const q = new PQueue({ concurrency: 4 })
  const block = new Promise<void>(() => {})
  for (let i = 0; i < 4; i++) void q.add(() => block)
  const before = heapUsed()
  const held: Array<Promise<unknown>> = []
  for (let i = 0; i < WAITING; i++) held.push(q.add(() => noop(i)))
  const after = heapUsed()
  const perTask = (after - before) / WAITING
  q.clear()
  held.length = 0
  return perTask
}

const retainedSwitchyard = async (keysPerLane: number, takeResult: boolean) => {
  const laneNames = Array.from({ length: LANES }, (_, i) => `l${i}`)
  const q = await createCommandQueue({
    lanes: Object.fromEntries(laneNames.map((name) => [name, { concurrent: 1, queued: WAITING / LANES }]))
  })
  const block = new Promise<void>(() => {})
  for (const name of laneNames) q.dispatch(name, "blocker", () => block)
  const keys = Array.from({ length: keysPerLane }, (_, i) => `key-${i}`)
  const before = heapUsed()
  const held: Array<AsyncFuture<number>> = []
  const results: Array<Promise<number>> = []
  for (let i = 0; i < WAITING; i++) {
    const f = q.dispatch(laneNames[i % LANES]!, keys[Math.floor(i / LANES) % keysPerLane]!, () => noop(i))
    held.push(f)
    if (takeResult) results.push(f.result)
  }
  const after = heapUsed()
  const perTask = (after - before) / WAITING
  held.length = 0
  results.length = 0
  await q.drain({ timeoutMs: 0 })
  return perTask
}

const retained = async () => {
  const pq = await retainedPQueue()
  const rows = [
    {
      name: `p-queue 10, ${WAITING.toLocaleString("en-US")} queued tasks (promises held)`,
      "bytes/task": pq,
      "vs p-queue": "1.00x"
    }
  ]
  const variants: ReadonlyArray<readonly [string, number, boolean]> = [
    ["switchyard, 1 key per lane, futures held", 1, false],
    ["switchyard, 1_000 keys per lane, futures held", 1_000, false],
    ["switchyard, 1_000 keys per lane, futures and .result held", 1_000, true],
    ["switchyard, a key per task, futures and .result held", WAITING / LANES, true]
  ]
  for (const [name, keys, takeResult] of variants) {
    const bytes = await retainedSwitchyard(keys, takeResult)
    rows.push({
      name: `${name} (${WAITING.toLocaleString("en-US")} waiting)`,
      "bytes/task": bytes,
      "vs p-queue": ratio(bytes, pq)
    })
  }
  table("heap retained per waiting task (lower is better; goal <= 0.50x p-queue)", rows)
}

// ---------------------------------------------------------------------------------------------
// (3) issue 12: 200k asynchronous no-op tasks, 8,000 in flight (a sliding window: each completion
// dispatches the next), 1,000 keys `k${i % 1000}`, concurrency 4; p-queue 10 given the same tasks

const TOTAL = 200_000
const IN_FLIGHT = 8_000

/** Dispatch `TOTAL` tasks through `submit`, never more than `IN_FLIGHT` unsettled, and wait for the last. */
const windowed = (submit: (i: number) => Promise<unknown>): Promise<void> =>
  new Promise((resolve, reject) => {
    let next = 0
    let settled = 0
    const onSettled = (): void => {
      settled++
      if (next < TOTAL) start()
      else if (settled === TOTAL) resolve()
    }
    const start = (): void => {
      const i = next++
      submit(i).then(onSettled, reject)
    }
    for (let k = 0; k < IN_FLIGHT; k++) start()
  })

const windowPeers = async (): Promise<ReadonlyArray<readonly [string, () => Promise<void>, () => Promise<void>]>> => {
  const keys = Array.from({ length: 1_000 }, (_, i) => `k${i}`)
  const pq = new PQueue({ concurrency: 4 })
  const cq = await createCommandQueue({ lanes: { bench: { concurrent: 4, queued: IN_FLIGHT } } })
  return [
    ["p-queue 10 (concurrency 4)", () => windowed((i) => pq.add(() => asyncNoop(i))), async () => {}],
    [
      "switchyard Promise API (k${i % 1000}, concurrent 4)",
      () => windowed((i) => cq.dispatch("bench", keys[i % 1_000]!, () => asyncNoop(i)).result),
      () => cq.close()
    ]
  ]
}

const issueThroughput = async () => {
  const rounds = Number(process.env.BENCH_ROUNDS ?? 5)
  const peers = await windowPeers()
  const rates = peers.map(() => [] as Array<number>)
  const cpus = peers.map(() => [] as Array<number>)
  for (const [, run] of peers) await run() // warm-up
  // The peers take turns, round after round: each sees the same mix of the machine's load.
  for (let r = 0; r < rounds; r++) {
    for (let p = 0; p < peers.length; p++) {
      const c0 = process.cpuUsage()
      const t0 = now()
      await peers[p]![1]()
      const ms = now() - t0
      const c = process.cpuUsage(c0)
      rates[p]!.push((TOTAL * 1000) / ms)
      cpus[p]!.push((c.user + c.system) / TOTAL)
    }
  }
  for (const [, , close] of peers) await close()
  const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!
  const pairRatios = rates[1]!.map((x, i) => x / rates[0]![i]!)
  table(
    `(3) issue 12: dispatch + await of ${TOTAL.toLocaleString("en-US")} asynchronous no-op tasks, ${
      IN_FLIGHT.toLocaleString("en-US")
    } in flight, 1,000 keys, concurrency 4, ${rounds} alternated rounds (goal >= 3x p-queue)`,
    peers.map(([name], p) => ({
      name,
      "best tasks/s": Math.max(...rates[p]!),
      "median tasks/s": median(rates[p]!),
      "vs p-queue (medians)": ratio(median(rates[p]!), median(rates[0]!)),
      "CPU µs/task (lowest)": Math.min(...cpus[p]!),
      "CPU vs p-queue": ratio(Math.min(...cpus[p]!), Math.min(...cpus[0]!))
    }))
  )
  console.log(
    `per-round ratios switchyard / p-queue: ${pairRatios.map((x) => x.toFixed(2)).join(", ")}; load average ${
      loadavg().map((l) => l.toFixed(1)).join(" ")
    }\n`
  )
}

// ---------------------------------------------------------------------------------------------
// (4) issue 12: heap per waiting task, 9,000 tasks of 9,000 distinct keys waiting behind blocked
// slots, the future `dispatch` returns held (as every caller does); p-queue with its promise held

const DISTINCT = 9_000

const heldPQueue = (): number => {
  const q = new PQueue({ concurrency: 4 })
  const block = new Promise<void>(() => {})
  for (let i = 0; i < 4; i++) void q.add(() => block)
  const held: Array<Promise<unknown>> = []
  const before = heapUsed()
  for (let i = 0; i < DISTINCT; i++) held.push(q.add(() => asyncNoop(i)))
  const after = heapUsed()
  q.clear()
  return (after - before) / DISTINCT
}

const heldSwitchyard = async (keys: ReadonlyArray<string>): Promise<number> => {
  const q = await createCommandQueue({ lanes: { bench: { concurrent: 4, queued: DISTINCT } } })
  const block = new Promise<void>(() => {})
  for (let i = 0; i < 4; i++) q.dispatch("bench", `blocker-${i}`, () => block)
  const held: Array<AsyncFuture<number>> = []
  const before = heapUsed()
  for (let i = 0; i < DISTINCT; i++) held.push(q.dispatch("bench", keys[i]!, () => asyncNoop(i)))
  const after = heapUsed()
  const perTask = (after - before) / DISTINCT
  if (held.length !== DISTINCT) throw new Error("unreachable")
  await q.drain({ timeoutMs: 0 })
  return perTask
}

const issueHeld = async () => {
  const keys = Array.from({ length: DISTINCT }, (_, i) => `k${i}`) // allocated before the baselines
  const pq: Array<number> = []
  const sy: Array<number> = []
  for (let r = 0; r < 7; r++) {
    pq.push(heldPQueue())
    sy.push(await heldSwitchyard(keys))
  }
  const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!
  table(
    `(4) issue 12: heap per waiting task, ${
      DISTINCT.toLocaleString("en-US")
    } distinct keys, the returned future held, median of 7 alternated rounds (goal <= 0.50x p-queue)`,
    [
      { name: "p-queue 10 (concurrency 4, promises held)", "bytes/task": median(pq), "vs p-queue": "1.00x" },
      {
        name: "switchyard Promise API (concurrent 4, futures held)",
        "bytes/task": median(sy),
        "vs p-queue": ratio(median(sy), median(pq))
      }
    ]
  )
}

// BENCH_ONLY=throughput: tables (1) only (the before/after runs); BENCH_ONLY=issue12: (3) and (4) only.
const only = process.env.BENCH_ONLY
if (only === undefined || only === "throughput") {
  await throughput(false)
  await throughput(true)
}
if (only === undefined) await retained()
if (only === undefined || only === "issue12") {
  await issueThroughput()
  await issueHeld()
}
void Exit
