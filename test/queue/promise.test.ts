import { afterEach, describe, expect, it, vi } from "vitest"
import { AdmissionError, createCommandQueue, FutureTimeout, LanesConfigInvalid, QueueFailure, RequestError } from "../../src/queue/index.js"
import type { AsyncCommandQueue } from "../../src/queue/index.js"

/** A promise with its resolver, to gate tasks deterministically. */
const gate = <A = void>() => {
  let resolve!: (a: A) => void
  let reject!: (e: unknown) => void
  const promise = new Promise<A>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

/** A task that says when it started, then waits for `release`; records its AbortSignal. */
const gated = <A>(value: A) => {
  const started = gate()
  const release = gate()
  let signal: AbortSignal | undefined
  return {
    task: async (s: AbortSignal) => {
      signal = s
      started.resolve()
      await release.promise
      return value
    },
    started: started.promise,
    release: () => release.resolve(),
    signal: () => signal!
  }
}

/** Lets queued Effect work (setImmediate) and promise reactions run. */
const flush = async (rounds = 5) => {
  for (let i = 0; i < rounds; i++) await new Promise((r) => setImmediate(r))
}

const queues: Array<AsyncCommandQueue> = []
const make = async (options?: Parameters<typeof createCommandQueue>[0]) => {
  const q = await createCommandQueue(options)
  queues.push(q)
  return q
}

afterEach(async () => {
  vi.useRealTimers()
  for (const q of queues.splice(0)) await q.drain({ timeoutMs: 0 })
})

describe("createCommandQueue", () => {
  it("rejects LanesConfigInvalid whose field is the option's path", async () => {
    const e1 = await createCommandQueue({ lanes: { main: { concurrent: 0, queued: 1 } } }).catch((e) => e)
    expect(e1).toBeInstanceOf(LanesConfigInvalid)
    expect(e1).toMatchObject({ field: "lanes.main.concurrent" })
    expect(e1.message).toBe("Expected `lanes.main.concurrent` to be an integer from 1 and up, got `0`")
    const e2 = await createCommandQueue({ drainTimeoutMs: -1 }).catch((e) => e)
    expect(e2).toMatchObject({ _tag: "LanesConfigInvalid", field: "drainTimeoutMs" })
  })

  it("has the default lanes main, heartbeat and cron in its snapshot", async () => {
    const q = await make()
    expect(q.snapshot().map((l) => [l.lane, l.concurrent, l.queued, l.participation])).toEqual([
      ["main", 4, 64, "blocking"],
      ["heartbeat", 1, 8, "background"],
      ["cron", 2, 32, "background"]
    ])
  })
})

describe("AsyncCommandQueue dispatch", () => {
  it("dispatch returns its future at once and result resolves with the task's value", async () => {
    const q = await make()
    const g = gated("v")
    const f = q.dispatch("main", "k", g.task)
    expect(f).toMatchObject({ lane: "main", key: "k", generation: 0, admission: "started" })
    expect(f.poll()).toEqual({ status: "pending" })
    await g.started
    const second = q.dispatch("main", "k", () => 2)
    expect(second.admission).toBe("queued")
    g.release()
    expect(await f.result).toBe("v")
    expect(await second.result).toBe(2)
    expect(f.poll()).toEqual({ status: "success", value: "v" })
  })

  it("dispatch at the ownership bound throws AdmissionError full synchronously", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 1 } } })
    const g = gated(1)
    q.dispatch("main", "a", g.task)
    q.dispatch("main", "b", () => 2)
    let thrown: unknown
    try {
      q.dispatch("main", "c", () => 3)
    } catch (e) {
      thrown = e
    }
    expect(thrown).toBeInstanceOf(AdmissionError)
    expect(thrown).toMatchObject({ lane: "main", key: "c", reason: "full" })
    g.release()
  })

  it("dispatch throws RequestError synchronously for an unknown lane, an empty key, a bad option or a task that is not a function", async () => {
    const q = await make()
    expect(() => q.dispatch("nope", "k", () => 1)).toThrow(RequestError)
    expect(() => q.dispatch("main", "", () => 1)).toThrow("Expected `key` to be a non-empty string")
    expect(() => q.dispatch("main", "k", () => 1, { turnTimeoutMs: 0 })).toThrow("Expected `turnTimeoutMs` to be a finite number greater than 0, got `0`")
    expect(() => q.dispatch("main", "k", 42 as never)).toThrow("Expected `task` to be a function")
    expect(q.snapshot()[0]).toMatchObject({ running: 0, waiting: 0, keys: 0 })
  })

  it("tasks of one key run one at a time in admission order (per-key FIFO)", async () => {
    const q = await make()
    const log: Array<number> = []
    let running = 0
    let most = 0
    const futures = []
    for (let i = 0; i < 10; i++) {
      futures.push(q.dispatch("main", "session", async () => {
        most = Math.max(most, ++running)
        await flush(1)
        log.push(i)
        running--
      }))
    }
    await Promise.all(futures.map((f) => f.result))
    expect(log).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    expect(most).toBe(1)
  })

  it("fairness across keys: a busy key runs one task, then waits behind the keys that queued meanwhile", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 10 } } })
    const log: Array<string> = []
    const g = gated("A1")
    const first = q.dispatch("main", "A", async (s) => {
      const v = await g.task(s)
      log.push(v)
    })
    await g.started
    const rest = [
      q.dispatch("main", "A", () => log.push("A2")),
      q.dispatch("main", "A", () => log.push("A3")),
      q.dispatch("main", "B", () => log.push("B1")),
      q.dispatch("main", "C", () => log.push("C1"))
    ]
    g.release()
    await first.result
    await Promise.all(rest.map((f) => f.result))
    expect(log).toEqual(["A1", "B1", "C1", "A2", "A3"])
  })

  it("a full main lane never delays heartbeat", async () => {
    const q = await make()
    const gates = []
    for (let i = 0; i < 68; i++) {
      const g = gated(i)
      gates.push(g)
      q.dispatch("main", `user-${i}`, g.task)
    }
    expect(() => q.dispatch("main", "more", () => 0)).toThrow(AdmissionError)
    expect(await q.dispatch("heartbeat", "beat", () => "ok").result).toBe("ok")
    expect(await q.dispatch("cron", "job", async () => "ran").result).toBe("ran")
    for (const g of gates) g.release()
  })

  it("coalesce joins a waiting task and carries its runId; a coalesced dispatch never fails for full", async () => {
    const q = await make({ lanes: { heartbeat: { concurrent: 1, queued: 1 } } })
    const g = gated("first")
    q.dispatch("heartbeat", "tick", g.task, { coalesce: true })
    await g.started
    let runs = 0
    const waiting = q.dispatch("heartbeat", "tick", () => ++runs, { coalesce: true })
    expect(waiting.admission).toBe("queued")
    expect(() => q.dispatch("heartbeat", "tick", () => ++runs)).toThrow(AdmissionError)
    const joined = q.dispatch("heartbeat", "tick", () => ++runs, { coalesce: true })
    expect(joined.admission).toBe("coalesced")
    expect(joined.runId).toBe(waiting.runId)
    g.release()
    expect(await joined.result).toBe(1)
    expect(await waiting.result).toBe(1)
    expect(runs).toBe(1)
  })
})

describe("AsyncFuture", () => {
  it("a task's own failure passes through unchanged: result rejects with what the task threw (a throw or a rejection)", async () => {
    const q = await make()
    const error = new Error("mine")
    await expect(q.dispatch("main", "a", () => {
      throw error
    }).result).rejects.toBe(error)
    await expect(q.dispatch("main", "b", () => Promise.reject(error)).result).rejects.toBe(error)
    const f = q.dispatch("main", "c", async () => {
      throw "a string"
    })
    await expect(f.result).rejects.toBe("a string")
    expect(f.poll()).toEqual({ status: "failure", error: "a string" })
  })

  it("a result nobody awaits causes no unhandled rejection", async () => {
    const seen: Array<unknown> = []
    const onRejection = (reason: unknown) => seen.push(reason)
    process.on("unhandledRejection", onRejection)
    try {
      const q = await make({ lanes: { main: { concurrent: 1, queued: 8 } } })
      const g = gated(0)
      q.dispatch("main", "a", g.task)
      q.dispatch("main", "b", () => Promise.reject(new Error("nobody listens")))
      const touched = q.dispatch("main", "c", () => {
        throw new Error("result taken, never awaited")
      })
      void touched.result
      const canceled = q.dispatch("main", "d", () => 1)
      void canceled.result
      void canceled.wait(1_000_000)
      await canceled.cancel()
      void q.dispatch("main", "e", () => 1).wait(0)
      g.release()
      await q.drain()
      await flush(20)
      expect(seen).toEqual([])
    } finally {
      process.off("unhandledRejection", onRejection)
    }
  })

  it("wait(ms) rejects FutureTimeout and the task goes on", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    const q = await make()
    const g = gated("late")
    const f = q.dispatch("main", "k", g.task)
    const waited = f.wait(1_000)
    await vi.advanceTimersByTimeAsync(1_000)
    const error = await waited.catch((e) => e)
    expect(error).toBeInstanceOf(FutureTimeout)
    expect(error).toMatchObject({ runId: f.runId, timeoutMs: 1_000 })
    g.release()
    expect(await f.wait(1_000)).toBe("late")
  })

  it("cancel() drops a waiting task: it fails canceled at stage queued and never runs", async () => {
    const q = await make()
    const g = gated(0)
    q.dispatch("main", "k", g.task)
    let ran = false
    const f = q.dispatch("main", "k", () => (ran = true))
    await f.cancel()
    const error = await f.result.catch((e) => e)
    expect(error).toBeInstanceOf(QueueFailure)
    expect(error).toMatchObject({ runId: f.runId, reason: "canceled", stage: "queued", participation: "blocking" })
    g.release()
    await q.dispatch("main", "k", () => 0).result
    expect(ran).toBe(false)
  })

  it("cancel() of a running task aborts its signal with the QueueFailure as reason; its slot is freed and its late result dropped", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 4 } } })
    const g = gated("ignored its signal")
    const f = q.dispatch("main", "a", g.task)
    await g.started
    const next = q.dispatch("main", "b", () => "b ran")
    await f.cancel()
    const error = await f.result.catch((e) => e)
    expect(error).toMatchObject({ _tag: "QueueFailure", reason: "canceled", stage: "running" })
    expect(g.signal().aborted).toBe(true)
    expect(g.signal().reason).toBe(error)
    // the task ignores its signal and is still running: its slot went to the next task anyway
    expect(await next.result).toBe("b ran")
    g.release()
    await flush()
    expect(f.poll()).toEqual({ status: "failure", error })
  })

  it("cancel() of a task that already ended keeps its outcome", async () => {
    const q = await make()
    const f = q.dispatch("main", "k", () => 1)
    expect(await f.result).toBe(1)
    await f.cancel()
    expect(f.poll()).toEqual({ status: "success", value: 1 })
  })

  it("aborting options.signal cancels the task as cancel() does", async () => {
    const q = await make()
    const controller = new AbortController()
    const g = gated(0)
    const f = q.dispatch("main", "k", g.task, { signal: controller.signal })
    await g.started
    controller.abort()
    const error = await f.result.catch((e) => e)
    expect(error).toMatchObject({ _tag: "QueueFailure", reason: "canceled", stage: "running" })
    expect(g.signal().reason).toBe(error)
  })

  it("an options.signal already aborted gives a future failed canceled at stage queued, and the task never runs", async () => {
    const q = await make()
    let ran = false
    const f = q.dispatch("main", "k", () => (ran = true), { signal: AbortSignal.abort() })
    expect(f.admission).toBe("queued")
    const error = await f.result.catch((e) => e)
    expect(error).toBeInstanceOf(QueueFailure)
    expect(error).toMatchObject({ runId: f.runId, reason: "canceled", stage: "queued" })
    await flush()
    expect(ran).toBe(false)
    expect(q.snapshot()[0]).toMatchObject({ running: 0, waiting: 0, keys: 0 })
  })
})

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
    expect(reports[0]).toMatchObject({ runId: ok.runId, lane: "cron", key: "job", generation: 0, exit: { _tag: "Success", value: "done" } })
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
