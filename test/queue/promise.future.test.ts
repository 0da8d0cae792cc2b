import { afterEach, describe, expect, it } from "vitest"
import { QueueFailure } from "../../src/queue/index.js"
import { cleanUp, flush, gated, make } from "./promise.helpers.js"

afterEach(cleanUp)

describe("Promise API: the future is its task", () => {
  it("a dispatch's future shows its task's public fields, and JSON of it gives only those", async () => {
    const q = await make({ lanes: { solo: { concurrent: 1, queued: 4 } } })
    const a = gated(1)
    const f = q.dispatch("solo", "k", a.task)
    const g = q.dispatch("solo", "k", () => 2, { coalesce: true })
    expect(JSON.parse(JSON.stringify(f))).toEqual({
      _id: "AsyncFuture",
      runId: f.runId,
      lane: "solo",
      key: "k",
      generation: 0,
      admission: "started"
    })
    expect(JSON.parse(JSON.stringify(g))).toMatchObject({ lane: "solo", key: "k", admission: "queued" })
    a.release()
    expect(await f.result).toBe(1)
    expect(await g.result).toBe(2)
  })

  it("a coalesced dispatch's future is a view of the task it joined: same runId, result and outcome", async () => {
    const q = await make({ lanes: { solo: { concurrent: 1, queued: 4 } } })
    const a = gated("a")
    q.dispatch("solo", "k", a.task)
    const waiting = q.dispatch("solo", "k", () => "w")
    const joined = q.dispatch("solo", "k", () => "never runs", { coalesce: true })
    expect(joined.admission).toBe("coalesced")
    expect(joined.runId).toBe(waiting.runId)
    expect(joined.result).toBe(waiting.result)
    a.release()
    expect(await joined.result).toBe("w")
    expect(joined.poll()).toEqual({ status: "success", value: "w" })
  })

  it("a result read before the task fails rejects with what it threw, and one nobody reads raises nothing", async () => {
    const q = await make()
    const boom = new Error("boom")
    const read = q.dispatch("main", "k", async () => {
      throw boom
    })
    const result = read.result
    q.dispatch("main", "other", async () => {
      throw new Error("nobody reads this")
    })
    await expect(result).rejects.toBe(boom)
    await flush()
    expect(read.poll()).toEqual({ status: "failure", error: boom })
  })

  it("cancel() of a running task starts nothing inside the call: the next task starts after it returns", async () => {
    const q = await make({ lanes: { solo: { concurrent: 1, queued: 4 } } })
    const a = gated("a")
    const first = q.dispatch("solo", "a", a.task)
    await a.started
    let nextRan = false
    const next = q.dispatch("solo", "b", () => {
      nextRan = true
      return "b"
    })
    const cancelling = first.cancel()
    expect(nextRan).toBe(false)
    await cancelling
    expect(await next.result).toBe("b")
    await expect(first.result).rejects.toBeInstanceOf(QueueFailure)
  })
})
