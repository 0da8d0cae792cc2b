/** The run-time lane controls through the Promise API: same engine, synchronous controls that throw, removeLane a Promise. */
import { afterEach, describe, expect, it } from "vitest"
import { AdmissionError, RequestError } from "../../src/queue/index.js"
import type { AsyncFuture } from "../../src/queue/index.js"
import { cleanUp, flush, gated, make } from "./promise.helpers.js"

afterEach(cleanUp)

const laneOf = (lanes: ReadonlyArray<{ readonly lane: string }>, name: string) => lanes.find((l) => l.lane === name)

describe("Promise API: lanes at run time", () => {
  it("addLane adds a lane at once; removeLane closes admission, lets tasks finish and forgets the lane", async () => {
    const q = await make()
    q.addLane("tools", { concurrent: 1, queued: 2 })
    expect(() => q.addLane("tools", { concurrent: 1, queued: 2 })).toThrow(RequestError)
    const a = gated("a")
    const running = q.dispatch("tools", "a", a.task)
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

  it("setLimits grows a lane at once and throws RequestError with field limits.concurrent for a bad value", async () => {
    const q = await make({ lanes: { tools: { concurrent: 1, queued: 4 } } })
    const tasks = ["a", "b"].map((k) => gated(k))
    const futures = tasks.map((t, i) => q.dispatch("tools", `k${i}`, t.task))
    expect(laneOf(q.snapshot(), "tools")).toMatchObject({ running: 1, waiting: 1 })
    q.setLimits("tools", { concurrent: 2 })
    expect(laneOf(q.snapshot(), "tools")).toMatchObject({ running: 2, waiting: 0 })
    expect(() => q.setLimits("tools", { concurrent: 0 })).toThrow(
      expect.objectContaining({ _tag: "RequestError", field: "limits.concurrent" })
    )
    for (const t of tasks) t.release()
    expect(await Promise.all(futures.map((f) => f.result))).toEqual(["a", "b"])
  })

  it("pause starts nothing while admission stays open; resume starts the longest waiter first", async () => {
    const q = await make({ lanes: { tools: { concurrent: 1, queued: 4 } } })
    const order: Array<string> = []
    q.pause("tools")
    expect(laneOf(q.snapshot(), "tools")).toMatchObject({ paused: true })
    const futures = ["x", "y"].map((k) => q.dispatch("tools", k, () => order.push(k)))
    await flush()
    expect(order).toEqual([])
    q.resume("tools")
    await Promise.all(futures.map((f) => f.result))
    expect(order).toEqual(["x", "y"])
    expect(() => q.pause("nope")).toThrow(RequestError)
  })

  it("groups: one budget over several lanes, groupSnapshot and setGroupLimits", async () => {
    const q = await make({ groups: { background: { concurrent: 1, lanes: ["heartbeat", "cron"] } } })
    const h = gated("h")
    const hf = q.dispatch("heartbeat", "h", h.task)
    const cf = q.dispatch("cron", "c", () => "c")
    expect(cf.admission).toBe("queued")
    expect(q.groupSnapshot()).toEqual([{ group: "background", concurrent: 1, running: 1, waiting: 1 }])
    q.setGroupLimits("background", { concurrent: 2 })
    expect(await cf.result).toBe("c")
    h.release()
    expect(await hf.result).toBe("h")
    expect(() => q.setGroupLimits("nope", { concurrent: 1 })).toThrow(RequestError)
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
})
