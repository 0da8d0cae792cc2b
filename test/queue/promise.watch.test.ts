/** The run-time controls of the Promise API: waitForIdle, clear, task.keepAlive(), abortGraceMs, self-await. */
import { afterEach, describe, expect, it, vi } from "vitest"
import { mayReadSignal } from "../../src/queue/engine/run.js"
import { RequestError } from "../../src/queue/index.js"
import type { AsyncFuture, TaskControl, WaitInfo } from "../../src/queue/index.js"
import { cleanUp, flush, gate, gated, make } from "./promise.helpers.js"

afterEach(cleanUp)

describe("AsyncCommandQueue waitForIdle and clear", () => {
  it("waitForIdle resolves once the lane is idle, admission open meanwhile; { idle: false } at the deadline", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    const q = await make({ lanes: { main: { concurrent: 1, queued: 4 } } })
    const g = gated("a")
    q.dispatch("main", "a", g.task)
    await g.started
    const late = await (async () => {
      const p = q.waitForIdle({ lane: "main", timeoutMs: 500 })
      await vi.advanceTimersByTimeAsync(500)
      return p
    })()
    expect(late).toEqual({ idle: false })
    let idle: { readonly idle: boolean } | undefined
    void q.waitForIdle().then((r) => (idle = r))
    const b = q.dispatch("main", "b", () => "b")
    await flush()
    expect(idle).toBeUndefined()
    g.release()
    expect(await b.result).toBe("b")
    await flush()
    expect(idle).toEqual({ idle: true })
    await expect(q.waitForIdle({ lane: "nope" })).rejects.toBeInstanceOf(RequestError)
  })

  it("clear fails the waiting tasks canceled, leaves the running one, resolves the count", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 4 } } })
    const g = gated("running")
    const running = q.dispatch("main", "a", g.task)
    await g.started
    let ran = 0
    const waiting = [q.dispatch("main", "a", () => ran++), q.dispatch("main", "b", () => ran++)]
    expect(await q.clear("main")).toBe(2)
    for (const f of waiting) {
      await expect(f.result).rejects.toMatchObject({ _tag: "QueueFailure", reason: "canceled", stage: "queued" })
    }
    expect(g.signal().aborted).toBe(false)
    g.release()
    expect(await running.result).toBe("running")
    expect(ran).toBe(0)
    await expect(q.clear("nope")).rejects.toBeInstanceOf(RequestError)
  })

  it("onWait gets queuedAhead in the Promise API too", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    const calls: Array<WaitInfo> = []
    const q = await make({
      lanes: { main: { concurrent: 1, queued: 4, warnAfterMs: 100 } },
      onWait: (info) => {
        calls.push(info)
      }
    })
    const g = gated("a")
    q.dispatch("main", "a", g.task)
    await g.started
    const b = q.dispatch("main", "b", () => "b")
    const c = q.dispatch("main", "c", () => "c")
    await vi.advanceTimersByTimeAsync(100)
    expect(calls.map((x) => [x.runId, x.queuedAhead])).toEqual([[b.runId, 0], [c.runId, 1]])
    g.release()
    await c.result
    expect(calls.slice(2).map((x) => [x.runId, x.queuedAhead])).toEqual([[b.runId, 0], [c.runId, 0]])
  })
})

describe("AsyncCommandQueue task.keepAlive()", () => {
  it("task.keepAlive() restarts turnTimeoutMs from now: progress is not cut, a stuck task is", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] })
    const q = await make({ lanes: { main: { concurrent: 2, queued: 4, turnTimeoutMs: 1_000 } } })
    const beat = async (signal: AbortSignal, task: TaskControl, beats: number) => {
      for (let i = 0; i < beats; i++) {
        await new Promise((r) => setTimeout(r, 600))
        if (signal.aborted) throw signal.reason
        task.keepAlive()
      }
      return "done"
    }
    const alive = q.dispatch("main", "alive", (signal, task) => beat(signal, task, 5))
    const stuckSignal = gate<AbortSignal>()
    const stuck = q.dispatch("main", "stuck", async (signal, task) => {
      stuckSignal.resolve(signal)
      await beat(signal, task, 1)
      return new Promise(() => {})
    })
    stuck.result.catch(() => {})
    await vi.advanceTimersByTimeAsync(1_599)
    expect(stuck.poll()).toEqual({ status: "pending" })
    await vi.advanceTimersByTimeAsync(1)
    await expect(stuck.result).rejects.toMatchObject({ reason: "timeout", stage: "running" })
    expect((await stuckSignal.promise).aborted).toBe(true)
    await vi.advanceTimersByTimeAsync(1_400)
    expect(await alive.result).toBe("done")
  })

  it("a task that takes (signal, task) gets its own signal and control, whatever its shape (mayReadSignal)", async () => {
    const q = await make()
    const seen: Array<string> = []
    const withTwo = (_s: AbortSignal, task: TaskControl) => {
      seen.push(`${task.lane}/${task.key}`)
      task.keepAlive() // no turn timeout: nothing to renew, no throw
    }
    function viaArguments() {
      // eslint-disable-next-line prefer-rest-params
      const task = arguments[1] as TaskControl
      seen.push(task.runId === f2.runId ? "arguments" : "wrong")
    }
    const rest = (...args: ReadonlyArray<unknown>) => {
      seen.push((args[1] as TaskControl).key)
    }
    expect([withTwo, viaArguments, rest].map(mayReadSignal)).toEqual([true, true, true])
    const f1 = q.dispatch("main", "two", withTwo)
    const f2: AsyncFuture<void> = q.dispatch("main", "args", viaArguments)
    const f3 = q.dispatch("main", "rest", rest)
    await Promise.all([f1.result, f2.result, f3.result])
    expect(seen).toEqual(["main/two", "arguments", "rest"])
  })
})

describe("AsyncCommandQueue abortGraceMs", () => {
  it("abortGraceMs: after the abort the slot stays held up to that long, then it is freed and a late result dropped", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    const q = await make({ lanes: { main: { concurrent: 1, queued: 4, abortGraceMs: 300 } } })
    const late = gate<string>()
    const f = q.dispatch("main", "a", () => late.promise, { turnTimeoutMs: 100 })
    let nextRan = false
    const next = q.dispatch("main", "b", () => {
      nextRan = true
      return "next"
    })
    await vi.advanceTimersByTimeAsync(100)
    // aborted, but the slot is still held for the grace
    expect(q.snapshot()[0]).toMatchObject({ running: 1, waiting: 1 })
    expect(nextRan).toBe(false)
    await vi.advanceTimersByTimeAsync(299)
    expect(nextRan).toBe(false)
    await vi.advanceTimersByTimeAsync(1)
    await expect(f.result).rejects.toMatchObject({ reason: "timeout", stage: "running" })
    expect(await next.result).toBe("next")
    late.resolve("too late")
    await flush()
    expect(f.poll()).toMatchObject({ status: "failure" })
  })

  it("abortGraceMs: a task that settles within the grace frees its slot then, failing with the abort's reason", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] })
    const q = await make({ lanes: { main: { concurrent: 1, queued: 4, abortGraceMs: 1_000 } } })
    const cleanedUp = gate()
    const f = q.dispatch("main", "a", (signal) =>
      new Promise<string>((resolve) => {
        signal.addEventListener("abort", () =>
          setTimeout(() => {
            cleanedUp.resolve()
            resolve("cleaned up")
          }, 50))
      }))
    const next = q.dispatch("main", "b", () => "next")
    await flush()
    const canceling = f.cancel()
    await vi.advanceTimersByTimeAsync(49)
    expect(q.snapshot()[0]).toMatchObject({ running: 1 })
    await vi.advanceTimersByTimeAsync(1)
    await cleanedUp.promise
    await canceling
    await expect(f.result).rejects.toMatchObject({ reason: "canceled", stage: "running" })
    expect(await next.result).toBe("next")
  })

  it("without abortGraceMs the slot is freed at the abort (as before)", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 4 } } })
    const f = q.dispatch("main", "a", () => new Promise(() => {}))
    const next = q.dispatch("main", "b", () => "next")
    await f.cancel()
    expect(await next.result).toBe("next")
  })
})

describe("AsyncCommandQueue nested dispatch", () => {
  it("reading result of a task of your own lane and key inside the task rejects RequestError at once (would wait for itself)", async () => {
    const q = await make()
    let inner: AsyncFuture<string> | undefined
    // JavaScript cannot tell who awaits a Promise: the check sees the task's synchronous part (up to its first await)
    const outer = q.dispatch("main", "session", async () => {
      inner = q.dispatch("main", "session", () => "inner")
      const waiting = q.dispatch("main", "session", () => "x").wait(1_000)
      const error = await inner.result.catch((e: unknown) => e)
      const waited = await waiting.catch((e: unknown) => e)
      const other = await q.dispatch("main", "other", () => "other").result
      return { error, waited, other }
    })
    const r = await outer.result
    for (const e of [r.error, r.waited]) {
      expect(e).toBeInstanceOf(RequestError)
      expect((e as RequestError).message).toContain("would wait for itself")
    }
    expect(r.other).toBe("other")
    expect(await inner!.result).toBe("inner")
  })

  it("nested dispatch to a subagent lane from a Promise task, awaited", async () => {
    const q = await make({ lanes: { main: { concurrent: 1, queued: 0 }, subagent: { concurrent: 1, queued: 1 } } })
    const outer = q.dispatch("main", "session", async () => {
      const child = q.dispatch("subagent", "session", async () => "child")
      return `parent got ${await child.result}`
    })
    expect(await outer.result).toBe("parent got child")
  })
})
