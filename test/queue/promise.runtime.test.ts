/**
 * The run-time lane controls through the Promise API: same engine; each control is applied before
 * it returns and gives a Promise that rejects with its RequestError (never an unhandled rejection).
 */
import { afterEach, describe, expect, it } from "vitest"
import { AdmissionError, RequestError } from "../../src/queue/index.js"
import type { AsyncFuture } from "../../src/queue/index.js"
import { cleanUp, flush, gated, make } from "./promise.helpers.js"

afterEach(cleanUp)

const laneOf = (lanes: ReadonlyArray<{ readonly lane: string }>, name: string) => lanes.find((l) => l.lane === name)

describe("Promise API: lanes at run time", () => {
  it("addLane adds a lane at once; removeLane closes admission, lets tasks finish and forgets the lane", async () => {
    const q = await make()
    const added = q.addLane("tools", { concurrent: 1, queued: 2 })
    const a = gated("a")
    // applied before addLane returned: the dispatch needs no await
    const running = q.dispatch("tools", "a", a.task)
    await expect(added).resolves.toBeUndefined()
    await expect(q.addLane("tools", { concurrent: 1, queued: 2 })).rejects.toMatchObject({
      _tag: "RequestError",
      lane: "tools"
    })
    await expect(q.addLane("x", { concurrent: 0, queued: 2 })).rejects.toMatchObject({
      _tag: "RequestError",
      field: "limits.concurrent"
    })
    const removed = q.removeLane("tools")
    expect(() => q.dispatch("tools", "b", () => 1)).toThrow(AdmissionError)
    a.release()
    expect(await running.result).toBe("a")
    expect(await removed).toEqual({ completed: 1, canceled: 0, timedOut: false })
    expect(laneOf(q.snapshot(), "tools")).toBeUndefined()
    await expect(q.removeLane("main")).rejects.toBeInstanceOf(RequestError)
  })

  it("unknownLane makes a lane on first dispatch", async () => {
    const q = await make({ unknownLane: { concurrent: 1, queued: 1 } })
    expect(await q.dispatch("session:9", "k", () => 9).result).toBe(9)
    expect(laneOf(q.snapshot(), "session:9")).toMatchObject({ concurrent: 1, queued: 1 })
  })

  it("setLimits grows a lane at once and rejects RequestError with field limits.concurrent for a bad value", async () => {
    const q = await make({ lanes: { tools: { concurrent: 1, queued: 4 } } })
    const tasks = ["a", "b"].map((k) => gated(k))
    const futures = tasks.map((t, i) => q.dispatch("tools", `k${i}`, t.task))
    expect(laneOf(q.snapshot(), "tools")).toMatchObject({ running: 1, waiting: 1 })
    const grown = q.setLimits("tools", { concurrent: 2 })
    expect(laneOf(q.snapshot(), "tools")).toMatchObject({ running: 2, waiting: 0 })
    await expect(grown).resolves.toBeUndefined()
    await expect(q.setLimits("tools", { concurrent: 0 })).rejects.toMatchObject({
      _tag: "RequestError",
      field: "limits.concurrent"
    })
    expect(laneOf(q.snapshot(), "tools")).toMatchObject({ concurrent: 2 })
    await expect(q.setLimits("nope", { concurrent: 1 })).rejects.toBeInstanceOf(RequestError)
    for (const t of tasks) t.release()
    expect(await Promise.all(futures.map((f) => f.result))).toEqual(["a", "b"])
  })

  it("pause starts nothing while admission stays open; resume starts the longest waiter first", async () => {
    const q = await make({ lanes: { tools: { concurrent: 1, queued: 4 } } })
    const order: Array<string> = []
    const paused = q.pause("tools")
    expect(laneOf(q.snapshot(), "tools")).toMatchObject({ paused: true })
    const futures = ["x", "y"].map((k) => q.dispatch("tools", k, () => order.push(k)))
    await flush()
    expect(order).toEqual([])
    await expect(paused).resolves.toBeUndefined()
    const resumed = q.resume("tools")
    expect(laneOf(q.snapshot(), "tools")).toMatchObject({ paused: false })
    await resumed
    await Promise.all(futures.map((f) => f.result))
    expect(order).toEqual(["x", "y"])
    await expect(q.pause("nope")).rejects.toMatchObject({ _tag: "RequestError", lane: "nope" })
    await expect(q.resume("nope")).rejects.toMatchObject({ _tag: "RequestError", lane: "nope" })
  })

  it("groups: one budget over several lanes, groupSnapshot and setGroupLimits", async () => {
    const q = await make({ groups: { background: { concurrent: 1, lanes: ["heartbeat", "cron"] } } })
    const h = gated("h")
    const hf = q.dispatch("heartbeat", "h", h.task)
    const cf = q.dispatch("cron", "c", () => "c")
    expect(cf.admission).toBe("queued")
    expect(q.groupSnapshot()).toEqual([{ group: "background", concurrent: 1, running: 1, waiting: 1 }])
    const grown = q.setGroupLimits("background", { concurrent: 2 })
    expect(q.groupSnapshot()).toEqual([{ group: "background", concurrent: 2, running: 2, waiting: 0 }])
    await grown
    expect(await cf.result).toBe("c")
    h.release()
    expect(await hf.result).toBe("h")
    await expect(q.setGroupLimits("nope", { concurrent: 1 })).rejects.toMatchObject({ _tag: "RequestError" })
    await expect(q.setGroupLimits("background", { concurrent: 0 })).rejects.toMatchObject({ _tag: "RequestError" })
  })

  it("a refused control nobody awaits raises no unhandled rejection", async () => {
    const q = await make()
    const unhandled: Array<unknown> = []
    const onUnhandled = (reason: unknown) => unhandled.push(reason)
    process.on("unhandledRejection", onUnhandled)
    try {
      void q.pause("nope")
      void q.setLimits("main", { concurrent: -1 })
      void q.addLane("main", { concurrent: 1, queued: 1 })
      void q.setGroupLimits("nope", { concurrent: 1 })
      await flush()
    } finally {
      process.off("unhandledRejection", onUnhandled)
    }
    expect(unhandled).toEqual([])
  })

  it("priority: higher first, one key in admission order", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 8 } } })
    const busy = gated("busy")
    const order: Array<string> = []
    const all: Array<AsyncFuture<unknown>> = [q.dispatch("main", "busy", busy.task)]
    all.push(q.dispatch("main", "low", () => order.push("low")))
    all.push(q.dispatch("main", "high", () => order.push("high"), { priority: 1 }))
    expect(() => q.dispatch("main", "bad", () => 0, { priority: Infinity })).toThrow(RequestError)
    busy.release()
    await Promise.all(all.map((f) => f.result))
    expect(order).toEqual(["high", "low"])
  })

  it("priority: a waiting key whose next task is cancelled is ranked by the task behind it", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 8 } } })
    const busy = gated("busy")
    const order: Array<string> = []
    const all: Array<AsyncFuture<unknown>> = [q.dispatch("main", "busy", busy.task)]
    const a1 = q.dispatch("main", "a", () => order.push("a1"))
    all.push(q.dispatch("main", "a", () => order.push("a2"), { priority: 5 }))
    all.push(q.dispatch("main", "b", () => order.push("b1"), { priority: 1 }))
    // key a waits with a1 (priority 0) next, behind b (1); once a1 is gone its next task is a2 (5)
    await a1.cancel()
    busy.release()
    await Promise.all(all.map((f) => f.result))
    expect(order).toEqual(["a2", "b1"])
  })
})
