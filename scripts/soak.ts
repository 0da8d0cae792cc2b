/**
 * Soak of the command queue (outside `npm test`): `npm run soak` (node --expose-gc).
 *
 * Pushes 2_000_000 tasks over 200_000 keys through the Promise API (the Effect engine under it),
 * with random coalescing, cancels (future.cancel, cancel(lane, key), AbortSignals), queue and turn
 * timeouts, tasks that throw, tasks that ignore their signal, and lane restarts. At the end it
 * checks: no future is left pending, every lane's running/waiting/keys is 0, and the heap is back
 * near where it started. Prints its figures; exits non-zero on any failure.
 *
 * Env: SOAK_TASKS (2_000_000), SOAK_KEYS (200_000), SOAK_WINDOW (4_000 in flight), SOAK_SEED.
 */
import { createCommandQueue, QueueFailure } from "../src/queue/index.js"
import type { AsyncFuture } from "../src/queue/index.js"

const TASKS = Number(process.env.SOAK_TASKS ?? 2_000_000)
const KEYS = Number(process.env.SOAK_KEYS ?? 200_000)
const WINDOW = Number(process.env.SOAK_WINDOW ?? 4_000)
const HEAP_SLACK_MB = Number(process.env.SOAK_HEAP_SLACK_MB ?? 24)
let seed = Number(process.env.SOAK_SEED ?? 20261130)

const random = (): number => {
  // mulberry32: deterministic for a given seed
  seed = (seed + 0x6d2b79f5) | 0
  let t = seed
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const pick = (n: number): number => Math.floor(random() * n)

const gc = (): void => {
  const g = (globalThis as { gc?: () => void }).gc
  if (g === undefined) throw new Error("run with node --expose-gc (npm run soak does)")
  g()
  g()
}
const heapMb = (): number => {
  gc()
  return process.memoryUsage().heapUsed / 1024 / 1024
}
const tick = () => new Promise<void>((resolve) => setImmediate(resolve))

const main = async (): Promise<number> => {
  const failures: Array<string> = []
  // keeps the process alive (and says so) if the queue ever stopped making progress
  let lastSettled = -1
  const watchdog = setInterval(() => {
    if (counts.settled === lastSettled && inFlight > 0) console.log(`no progress for 10 s: ${inFlight} in flight`)
    lastSettled = counts.settled
  }, 10_000)
  const q = await createCommandQueue({
    lanes: {
      main: { concurrent: 32, queued: 6_000, queueTimeoutMs: 200, warnAfterMs: 60_000 },
      heartbeat: { concurrent: 2, queued: 500 },
      cron: { concurrent: 16, queued: 3_000, turnTimeoutMs: 15 },
      tools: { concurrent: 64, queued: 10_000 }
    },
    drainTimeoutMs: 5_000
  })
  const laneNames = ["main", "heartbeat", "cron", "tools"] as const
  const keys = Array.from({ length: KEYS }, (_, i) => `key-${i}`)

  const counts = {
    dispatched: 0,
    refused: 0,
    settled: 0,
    succeeded: 0,
    ownFailures: 0,
    queueFailures: { canceled: 0, timeout: 0, closed: 0, stale: 0 } as Record<string, number>,
    unexpected: 0,
    coalesced: 0,
    restarts: 0
  }

  /** A task of one of several shapes; some ignore their signal (the queue frees their slot anyway). */
  const makeTask = () => {
    const shape = random()
    if (shape < 0.4) return () => 1
    if (shape < 0.7) return async () => 2
    if (shape < 0.85) return () => new Promise<number>((resolve) => setImmediate(() => resolve(3)))
    if (shape < 0.92) {
      return () => {
        throw new Error("own failure")
      }
    }
    if (shape < 0.96) {
      // waits for its signal: only the queue ends it (its turn timeout, a cancel, a restart)
      return (signal: AbortSignal) =>
        new Promise<number>((_, reject) =>
          signal.addEventListener("abort", () => reject(signal.reason), { once: true })
        )
    }
    // ignores its signal; ends by itself a little later
    return () => new Promise<number>((resolve) => setTimeout(() => resolve(4), 1 + pick(10)))
  }

  let inFlight = 0
  let wake: (() => void) | undefined
  const recent: Array<AsyncFuture<number>> = []
  const onSettled = (outcome: unknown, ok: boolean) => {
    inFlight--
    counts.settled++
    if (ok) counts.succeeded++
    else if (outcome instanceof QueueFailure) counts.queueFailures[outcome.reason]!++
    else if (outcome instanceof Error && outcome.message === "own failure") counts.ownFailures++
    else counts.unexpected++
    if (wake !== undefined && inFlight < WINDOW / 2) {
      const w = wake
      wake = undefined
      w()
    }
  }

  // warm up, then take the starting heap with the queue made and idle
  for (let i = 0; i < 5_000; i++) q.dispatch("tools", keys[i % 1000]!, () => i)
  await q.dispatch("tools", "warm", () => 0).result
  while (q.snapshot().some((l) => l.running + l.waiting > 0)) await tick()
  const heapStart = heapMb()
  const started = performance.now()

  for (let i = 0; i < TASKS; i++) {
    if (inFlight >= WINDOW) await new Promise<void>((resolve) => (wake = resolve))
    const lane = laneNames[pick(laneNames.length)]!
    const key = lane === "heartbeat" ? `beat-${pick(16)}` : keys[pick(KEYS)]!
    const r = random()
    const controller = r < 0.02 ? new AbortController() : undefined
    const task = makeTask()
    // a task that only its signal ends always gets a turn timeout (cron's lane has one anyway)
    const turnTimeoutMs = task.length > 0 || (r > 0.95 && r <= 0.97) ? 1 + pick(10) : undefined
    try {
      const future = q.dispatch(lane, key, task, {
        ...(r < 0.15 ? { coalesce: true } : {}),
        ...(r > 0.97 ? { queueTimeoutMs: 1 + pick(20) } : {}),
        ...(turnTimeoutMs !== undefined ? { turnTimeoutMs } : {}),
        ...(controller !== undefined ? { signal: controller.signal } : {})
      })
      counts.dispatched++
      if (future.admission === "coalesced") counts.coalesced++
      inFlight++
      future.result.then((v) => onSettled(v, true), (e) => onSettled(e, false))
      if (controller !== undefined) setImmediate(() => controller.abort())
      recent.push(future)
      if (recent.length > 256) recent.shift()
    } catch (error) {
      counts.refused++
      if (!(error instanceof Error) || (error as { _tag?: string })._tag !== "AdmissionError") {
        failures.push(`dispatch threw something else than AdmissionError: ${String(error)}`)
        break
      }
      await tick()
    }
    const event = random()
    if (event < 0.01 && recent.length > 0) void recent[pick(recent.length)]!.cancel()
    else if (event < 0.012) void q.cancel(lane, key)
    if (i > 0 && i % 100_000 === 0) {
      counts.restarts++
      void q.restartLane(laneNames[pick(laneNames.length)]!)
      const s = q.snapshot()
      console.log(
        `${(i / 1e6).toFixed(1)}M tasks, ${
          Math.round(i / ((performance.now() - started) / 1000)).toLocaleString("en-US")
        } tasks/s, in flight ${inFlight}, heap ${(process.memoryUsage().heapUsed / 1024 / 1024).toFixed(0)} MB, keys ${
          s.map((l) => `${l.lane}=${l.keys}`).join(" ")
        }`
      )
    }
  }
  // every admitted task ends: the stuck ones by their timeout, cancel or a final restart
  const deadline = performance.now() + 60_000
  while (inFlight > 0 && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20))
    if (performance.now() > deadline - 55_000) await q.restartAll()
  }
  const seconds = (performance.now() - started) / 1000
  for (let i = 0; i < 10; i++) await tick()

  const pending = counts.dispatched - counts.settled
  if (pending !== 0) failures.push(`${pending} futures still pending`)
  if (counts.unexpected !== 0) failures.push(`${counts.unexpected} futures failed with something unexpected`)
  for (const f of recent) if (f.poll().status === "pending") failures.push(`future ${f.runId} polls pending`)
  const snapshot = q.snapshot()
  for (const l of snapshot) {
    if (l.keys !== 0 || l.running !== 0 || l.waiting !== 0) {
      failures.push(`lane ${l.lane}: running ${l.running}, waiting ${l.waiting}, keys ${l.keys} (expected 0)`)
    }
  }
  recent.length = 0
  const heapEnd = heapMb()
  await q.close()
  clearInterval(watchdog)
  const heapClosed = heapMb()
  if (heapEnd > heapStart + HEAP_SLACK_MB) {
    failures.push(`heap grew from ${heapStart.toFixed(1)} MB to ${heapEnd.toFixed(1)} MB (slack ${HEAP_SLACK_MB} MB)`)
  }

  console.log("\n# CommandQueue soak")
  console.log(
    `tasks attempted      ${TASKS.toLocaleString("en-US")} over ${KEYS.toLocaleString("en-US")} keys, window ${WINDOW}`
  )
  console.log(
    `admitted             ${counts.dispatched.toLocaleString("en-US")} (coalesced ${
      counts.coalesced.toLocaleString("en-US")
    }), refused full ${counts.refused.toLocaleString("en-US")}`
  )
  console.log(
    `settled              ${counts.settled.toLocaleString("en-US")}: ok ${
      counts.succeeded.toLocaleString("en-US")
    }, own failures ${counts.ownFailures.toLocaleString("en-US")}, queue failures ${
      JSON.stringify(counts.queueFailures)
    }`
  )
  console.log(`restarts             ${counts.restarts} (+ restartAll at the end if tasks were still stuck)`)
  console.log(
    `time                 ${seconds.toFixed(1)} s (${
      Math.round(counts.dispatched / seconds).toLocaleString("en-US")
    } tasks/s)`
  )
  console.log(
    `heap                 start ${heapStart.toFixed(1)} MB, end ${heapEnd.toFixed(1)} MB, after close ${
      heapClosed.toFixed(1)
    } MB`
  )
  console.log(
    `lanes at the end     ${
      snapshot.map((l) => `${l.lane}: running ${l.running} waiting ${l.waiting} keys ${l.keys}`).join("; ")
    }`
  )
  if (failures.length > 0) {
    console.log(`\nFAILED:\n- ${failures.join("\n- ")}`)
    return 1
  }
  console.log("\nOK: no future pending, every lane's keys 0, heap back near its start")
  return 0
}

main().then(
  (code) => {
    process.exitCode = code
  },
  (error) => {
    console.error(error)
    process.exitCode = 1
  }
)
