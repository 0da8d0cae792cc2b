import { afterEach, describe, expect, it, vi } from "vitest"
import {
  AdmissionError,
  createCommandQueue,
  FutureTimeout,
  LanesConfigInvalid,
  QueueFailure,
  RequestError
} from "../../src/queue/index.js"
import { cleanUp, flush, gated, make } from "./promise.helpers.js"

afterEach(cleanUp)

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

  it("admission started means the task holds its slot at once: snapshot counts it running right after dispatch", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 4 } } })
    const g = gated("a")
    const a = q.dispatch("main", "a", g.task)
    const b = q.dispatch("main", "b", () => "b")
    expect([a.admission, b.admission]).toEqual(["started", "queued"])
    expect(q.snapshot()[0]).toMatchObject({ running: 1, waiting: 1, keys: 2 })
    g.release()
    expect(await b.result).toBe("b")
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
    expect(() => q.dispatch("main", "k", () => 1, { turnTimeoutMs: 0 })).toThrow(
      "Expected `turnTimeoutMs` to be a finite number greater than 0, got `0`"
    )
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
    await expect(
      q.dispatch("main", "a", () => {
        throw error
      }).result
    ).rejects.toBe(error)
    await expect(q.dispatch("main", "b", () => Promise.reject(error)).result).rejects.toBe(error)
    const f = q.dispatch("main", "c", async () => {
      // eslint-disable-next-line @typescript-eslint/only-throw-error -- a task that throws a non-Error is what this checks
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

  it("wait(ms) over 2^31-1 ms (where setTimeout fires after 1 ms) rejects only when its whole time has passed", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    const q = await make()
    const g = gated("late")
    const f = q.dispatch("main", "k", g.task)
    const ms = 2 ** 31 + 5_000
    let outcome: unknown = "pending"
    f.wait(ms).catch((e) => (outcome = e))
    const forever = f.wait(Number.POSITIVE_INFINITY)
    await vi.advanceTimersByTimeAsync(10)
    expect(outcome).toBe("pending")
    await vi.advanceTimersByTimeAsync(ms - 11)
    expect(outcome).toBe("pending")
    await vi.advanceTimersByTimeAsync(1)
    expect(outcome).toBeInstanceOf(FutureTimeout)
    expect(outcome).toMatchObject({ runId: f.runId, timeoutMs: ms })
    g.release()
    expect(await forever).toBe("late")
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

  it("a late result of a cancelled task never settles the next tasks of its key, whichever promise settles first", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 8 } } })
    const first = gated("first, late")
    const second = gated("second")
    const third = gated("third")
    // one key, several tasks: they share the key's promise handlers while nothing else holds them
    const f1 = q.dispatch("main", "k", first.task)
    const f2 = q.dispatch("main", "k", second.task)
    const f3 = q.dispatch("main", "k", third.task)
    const f4 = q.dispatch("main", "k", async () => "fourth")
    await first.started
    await f1.cancel() // its promise is still out
    await second.started
    first.release() // the late result arrives while the second task runs
    await flush()
    expect(f2.poll()).toEqual({ status: "pending" })
    second.release()
    expect(await f2.result).toBe("second")
    await third.started
    third.release()
    expect(await f3.result).toBe("third")
    expect(await f4.result).toBe("fourth")
    expect(await f1.result.catch((e) => e)).toMatchObject({ _tag: "QueueFailure", reason: "canceled" })
  })

  it("a task's promise that rejects fails its future with that error; the key's next task runs on", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 8 } } })
    const boom = new Error("boom")
    const f1 = q.dispatch("main", "k", async () => {
      throw boom
    })
    const f2 = q.dispatch("main", "k", async () => 2)
    const f3 = q.dispatch("main", "k", () => Promise.reject(boom))
    expect(await f1.result.catch((e) => e)).toBe(boom)
    expect(await f2.result).toBe(2)
    expect(await f3.result.catch((e) => e)).toBe(boom)
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
