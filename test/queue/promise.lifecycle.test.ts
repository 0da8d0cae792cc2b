import { afterEach, describe, expect, it, vi } from "vitest"
import { mayReadSignal } from "../../src/queue/engine/run.js"
import { AdmissionError, createCommandQueue, RequestError } from "../../src/queue/index.js"
import { cleanUp, flush, gate, gated, make } from "./promise.helpers.js"

afterEach(cleanUp)

describe("AsyncCommandQueue timeouts", () => {
  it("queueTimeoutMs fails a task not started by then (timeout, stage queued)", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    const q = await make({ lanes: { main: { concurrent: 1, queued: 4, queueTimeoutMs: 100 } } })
    const g = gated(0)
    q.dispatch("main", "a", g.task)
    await g.started
    let ran = false
    const f = q.dispatch("main", "b", () => (ran = true))
    await vi.advanceTimersByTimeAsync(100)
    expect(await f.result.catch((e) => e)).toMatchObject({ reason: "timeout", stage: "queued" })
    expect(q.snapshot()[0]).toMatchObject({ waiting: 0 })
    g.release()
    await flush()
    expect(ran).toBe(false)
  })

  it("turnTimeoutMs aborts a task running longer (timeout, stage running) and frees its slot", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    const q = await make({ lanes: { main: { concurrent: 1, queued: 4 } } })
    const g = gated(0)
    const f = q.dispatch("main", "a", g.task, { turnTimeoutMs: 500 })
    await g.started
    const next = q.dispatch("main", "b", () => "next")
    await vi.advanceTimersByTimeAsync(500)
    const error = await f.result.catch((e) => e)
    expect(error).toMatchObject({ reason: "timeout", stage: "running" })
    expect(g.signal().reason).toBe(error)
    expect(await next.result).toBe("next")
    g.release()
  })
})

describe("AsyncCommandQueue task signals, whatever the task's arity", () => {
  it("mayReadSignal: only an arrow with () and a function () that never says `arguments` go without a signal", () => {
    const blind = [() => 1, async () => 1, function() {
      return 1
    }, async function named() {
      return 1
    }, function* gen() {
      yield 1
    }]

    const seeing = [
      (s: AbortSignal) => s,
      (...args: Array<unknown>) => args,
      (s: unknown = 1) => s,
      function() {
        // eslint-disable-next-line prefer-rest-params
        return arguments[0]
      },
      ((s: unknown) => s).bind(null, 1),
      // a method taken off its object: what is checked is its source text, it is never called
      // eslint-disable-next-line @typescript-eslint/unbound-method
      {
        m() {
          return 1
        }
      }.m,
      Math.max
    ]
    for (const f of blind) expect(mayReadSignal(f), String(f)).toBe(false)
    for (const f of seeing) expect(mayReadSignal(f), String(f)).toBe(true)
  })

  it("a task of length 0 that reads its argument ((...args), a default parameter, arguments) gets its own signal, aborted by turnTimeoutMs", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    const q = await make({ lanes: { main: { concurrent: 4, queued: 4 } } })
    const never = gate()
    const seen: Array<AbortSignal> = []
    const tasks = [
      (...args: Array<unknown>) => (seen.push(args[0] as AbortSignal), never.promise),
      (s: AbortSignal | undefined = undefined) => (seen.push(s!), never.promise),
      function() {
        // eslint-disable-next-line prefer-rest-params
        seen.push(arguments[0] as AbortSignal)
        return never.promise
      }
    ]
    for (const t of tasks) expect(t.length).toBe(0)
    const futures = tasks.map((t, i) => q.dispatch("main", `k${i}`, t as () => Promise<void>, { turnTimeoutMs: 500 }))
    await flush()
    expect(seen).toHaveLength(3)
    expect(new Set(seen).size).toBe(3)
    for (const s of seen) {
      expect(s).toBeInstanceOf(AbortSignal)
      expect(s.aborted).toBe(false)
    }
    await vi.advanceTimersByTimeAsync(500)
    for (const [i, f] of futures.entries()) {
      const error = await f.result.catch((e) => e)
      expect(error).toMatchObject({ reason: "timeout", stage: "running" })
      expect(seen[i]!.aborted).toBe(true)
      expect(seen[i]!.reason).toBe(error)
    }
    never.resolve()
  })

  it("2,000 (...args) tasks that listen on their signal share none, and no MaxListenersExceededWarning", async () => {
    const warnings: Array<string> = []
    const onWarning = (w: Error) => warnings.push(w.name)
    process.on("warning", onWarning)
    try {
      const q = await make({ lanes: { main: { concurrent: 8, queued: 2_000 } } })
      const signals = new Set<AbortSignal>()
      const futures = []
      for (let i = 0; i < 2_000; i++) {
        futures.push(
          q.dispatch("main", `k${i % 50}`, (...args: Array<unknown>) => {
            const s = args[0] as AbortSignal
            signals.add(s)
            s.addEventListener("abort", () => {})
            return i
          }).result
        )
      }
      await Promise.all(futures)
      await flush()
      expect(signals.size).toBe(2_000)
      expect(warnings).not.toContain("MaxListenersExceededWarning")
    } finally {
      process.off("warning", onWarning)
    }
  })
})

describe("AsyncCommandQueue generations", () => {
  it("restartLane fails waiting tasks stale and they never run; running ones are aborted; it returns the new generation", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 8 } } })
    const g = gated(0)
    const running = q.dispatch("main", "a", g.task)
    await g.started
    let ran = 0
    const waiting = [q.dispatch("main", "a", () => ran++), q.dispatch("main", "b", () => ran++)]
    expect(await q.restartLane("main")).toBe(1)
    for (const f of waiting) expect(await f.result.catch((e) => e)).toMatchObject({ reason: "stale", stage: "queued" })
    const error = await running.result.catch((e) => e)
    expect(error).toMatchObject({ reason: "stale", stage: "running" })
    expect(g.signal().reason).toBe(error)
    // a stale task cannot start after restartLane returned; the lane keeps working
    const fresh = q.dispatch("main", "a", () => "fresh")
    expect(fresh.generation).toBe(1)
    expect(await fresh.result).toBe("fresh")
    expect(ran).toBe(0)
    expect(q.generation("main")).toBe(1)
    g.release()
  })

  it("a stale task cannot start after restartLane returns", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 100 } } })
    const g = gated(0)
    q.dispatch("main", "blocker", g.task)
    await g.started
    let started = 0
    const stale = []
    for (let i = 0; i < 50; i++) stale.push(q.dispatch("main", `k${i % 5}`, () => started++))
    await q.restartLane("main")
    for (const f of stale) expect(f.poll()).toMatchObject({ status: "failure", error: { reason: "stale" } })
    g.release()
    await q.dispatch("main", "after", () => 0).result
    await flush()
    expect(started).toBe(0)
  })

  it("restartAll restarts every lane; generation reads it and throws RequestError for an unknown lane", async () => {
    const q = await make()
    await q.restartAll()
    expect(q.snapshot().map((l) => l.generation)).toEqual([1, 1, 1])
    expect(() => q.generation("nope")).toThrow(RequestError)
    await expect(q.restartLane("nope")).rejects.toBeInstanceOf(RequestError)
  })

  it("cancel(lane, key) cancels every task of that key", async () => {
    const q = await make()
    const g = gated(0)
    const a = q.dispatch("main", "k", g.task)
    const b = q.dispatch("main", "k", () => 1)
    await g.started
    await q.cancel("main", "k")
    expect(await a.result.catch((e) => e)).toMatchObject({ reason: "canceled", stage: "running" })
    expect(await b.result.catch((e) => e)).toMatchObject({ reason: "canceled", stage: "queued" })
  })
})

describe("AsyncCommandQueue reporting", () => {
  it("onTaskExit is called once per task with runId, lane, key, generation, exit, waitedMs and ranMs, before the result settles", async () => {
    const reports: Array<{ runId: string; lane: string; key: string; generation: number; exit: unknown }> = []
    const q = await make({ onTaskExit: (report) => void reports.push(report) })
    const ok = q.dispatch("cron", "job", () => "done")
    await ok.result
    expect(reports).toHaveLength(1)
    expect(reports[0]).toMatchObject({
      runId: ok.runId,
      lane: "cron",
      key: "job",
      generation: 0,
      exit: { _tag: "Success", value: "done" }
    })
    const g = gated(0)
    q.dispatch("cron", "job", g.task)
    const dropped = q.dispatch("cron", "job", () => 1)
    await dropped.cancel()
    expect(reports).toHaveLength(2)
    expect(reports[1]).toMatchObject({ runId: dropped.runId, exit: { _tag: "Failure" } })
    g.release()
  })
})

describe("AsyncCommandQueue drain and close", () => {
  it("drain lets admitted work finish then fails the rest closed; later dispatches throw AdmissionError closed", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    const q = await make({ lanes: { main: { concurrent: 1, queued: 4 } } })
    const quick = gated("quick")
    const stuck = gated("stuck")
    const f1 = q.dispatch("main", "a", quick.task)
    const f2 = q.dispatch("main", "b", stuck.task)
    const f3 = q.dispatch("main", "c", () => "never")
    await quick.started
    const drained = q.drain({ timeoutMs: 1_000 })
    expect(() => q.dispatch("main", "d", () => 0)).toThrow(AdmissionError)
    quick.release()
    expect(await f1.result).toBe("quick")
    await stuck.started
    await vi.advanceTimersByTimeAsync(1_000)
    expect(await drained).toEqual({ completed: 1, canceled: 2, timedOut: true })
    expect(await f2.result.catch((e) => e)).toMatchObject({ reason: "closed", stage: "running" })
    expect(await f3.result.catch((e) => e)).toMatchObject({ reason: "closed", stage: "queued" })
    expect(stuck.signal().aborted).toBe(true)
    expect(q.snapshot().every((l) => l.draining && l.running === 0 && l.waiting === 0)).toBe(true)
  })

  it("close() drains with the default deadline, then releases everything; it is idempotent", async () => {
    const q = await createCommandQueue()
    const g = gated("done")
    const f = q.dispatch("main", "k", g.task)
    await g.started
    const closing = q.close()
    expect(q.close()).toBe(closing)
    g.release()
    await closing
    expect(await f.result).toBe("done")
    let thrown: unknown
    try {
      q.dispatch("main", "k", () => 1)
    } catch (e) {
      thrown = e
    }
    expect(thrown).toMatchObject({ _tag: "AdmissionError", reason: "closed" })
  })

  // The million-key run is in CommandQueue.lifecycle.test.ts (same engine); here 100,000 keep the file fast.
  it("after 100,000 distinct keys have come and gone, every lane's keys is 0", async () => {
    const q = await make({ lanes: { main: { concurrent: 64, queued: 10_000 } } })
    const batch = 10_000
    for (let n = 0; n < 100_000; n += batch) {
      const results = []
      for (let i = n; i < n + batch; i++) results.push(q.dispatch("main", `key-${i}`, () => i).result)
      await Promise.all(results)
    }
    for (const l of q.snapshot()) expect(l).toMatchObject({ running: 0, waiting: 0, keys: 0 })
  }, 60_000)
})
