/** The run-time controls of the Effect API: waitForIdle, clear, onWait, keepAlive, nested dispatch. */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { CommandQueue, RequestError } from "../../src/queue/index.js"
import type { WaitInfo } from "../../src/queue/index.js"
import { captureLogs, gated, makeQueue } from "./CommandQueue.helpers.js"

describe("CommandQueue waitForIdle", () => {
  it.effect("waitForIdle waits until the lane has nothing running or waiting, and admission stays open", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 4 } } })
      const g = yield* gated("a")
      yield* queue.dispatch("main", "a", g.task)
      const waiting = yield* queue.dispatch("main", "b", Effect.succeed("b"))
      yield* g.started
      const idle = yield* Effect.forkChild(queue.waitForIdle({ lane: "main" }))
      // other lanes are idle at once; admission is still open while someone waits for idle
      expect(yield* queue.waitForIdle({ lane: "cron" })).toEqual({ idle: true })
      const later = yield* queue.dispatch("main", "c", Effect.succeed("c"))
      expect(idle.pollUnsafe()).toBeUndefined()
      yield* g.release
      expect(yield* Fiber.join(idle)).toEqual({ idle: true })
      expect(yield* waiting.await).toBe("b")
      expect(yield* later.await).toBe("c")
      expect((yield* queue.snapshot).find((l) => l.lane === "main")).toMatchObject({ running: 0, waiting: 0 })
    }))

  it.effect("waitForIdle returns { idle: false } at the deadline and leaves the work alone", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const g = yield* gated("a")
      const f = yield* queue.dispatch("cron", "tick", g.task)
      yield* g.started
      const idle = yield* Effect.forkChild(queue.waitForIdle({ timeoutMs: 1_000 }))
      yield* TestClock.adjust(999)
      expect(idle.pollUnsafe()).toBeUndefined()
      yield* TestClock.adjust(1)
      expect(yield* Fiber.join(idle)).toEqual({ idle: false })
      yield* g.release
      expect(yield* f.await).toBe("a")
      expect(yield* queue.waitForIdle({ timeoutMs: 0 })).toEqual({ idle: true })
    }))

  it.effect("waitForIdle with a bad option or an unknown lane dies with RequestError", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const unknown = yield* Effect.exit(queue.waitForIdle({ lane: "nope" }))
      expect(JSON.stringify(unknown)).toContain("RequestError")
      const bad = yield* Effect.exit(queue.waitForIdle({ timeoutMs: -1 }))
      expect(JSON.stringify(bad)).toContain("Expected `timeoutMs` to be a number from 0 and up, got `-1`")
    }))
})

describe("CommandQueue clear", () => {
  it.effect("clear fails every waiting task canceled (stage queued, finalizers run), leaves running ones, returns the count", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 8 } } })
      const g = yield* gated("running")
      const running = yield* queue.dispatch("main", "a", g.task)
      yield* g.started
      const finalized: Array<string> = []
      let ran = 0
      const waiting = []
      for (const key of ["a", "b", "b", "c"]) {
        waiting.push(
          yield* queue.dispatch("main", key, Effect.sync(() => ran++), {
            finalizer: () => Effect.sync(() => finalized.push(key))
          })
        )
      }
      const other = yield* queue.dispatch("cron", "x", Effect.succeed("cron untouched"))
      expect(yield* queue.clear("main")).toBe(4)
      expect(finalized.sort()).toEqual(["a", "b", "b", "c"])
      for (const f of waiting) {
        expect(yield* Effect.flip(f.await)).toMatchObject({ _tag: "QueueFailure", reason: "canceled", stage: "queued" })
      }
      expect(running.poll.pipe(Effect.runSync)._tag).toBe("None")
      yield* g.release
      expect(yield* running.await).toBe("running")
      expect(yield* other.await).toBe("cron untouched")
      expect(ran).toBe(0)
      expect(yield* queue.clear("main")).toBe(0)
      expect(yield* Effect.flip(queue.clear("nope"))).toBeInstanceOf(RequestError)
      // the lane works on afterwards
      const after = yield* queue.dispatch("main", "a", Effect.succeed("after"))
      expect(yield* after.await).toBe("after")
    }))
})

/** A queue whose main lane (concurrent 1, warnAfterMs 100) runs a gated task of key `a`; the `onWait` calls. */
const busyMain = Effect.gen(function*() {
  const calls: Array<WaitInfo> = []
  const queue = yield* makeQueue({
    lanes: { main: { concurrent: 1, queued: 8, warnAfterMs: 100 } },
    onWait: (info) => {
      calls.push(info)
    }
  })
  const g = yield* gated("a")
  yield* queue.dispatch("main", "a", g.task)
  yield* g.started
  return { calls, g, queue }
})

describe("CommandQueue onWait", () => {
  it.effect("onWait is called once when a task has waited warnAfterMs and again when it starts, with queuedAhead", () =>
    Effect.gen(function*() {
      const { calls, g, queue } = yield* busyMain
      // start order: b1 (b's turn), c1 (c's turn), a2 (a runs now: its follow-up queues last), b2 (b's second turn)
      const b1 = yield* queue.dispatch("main", "b", Effect.void)
      const c1 = yield* queue.dispatch("main", "c", Effect.void)
      const a2 = yield* queue.dispatch("main", "a", Effect.void)
      const b2 = yield* queue.dispatch("main", "b", Effect.void)
      yield* TestClock.adjust(99)
      expect(calls).toEqual([])
      yield* TestClock.adjust(1)
      const ahead = Object.fromEntries(calls.map((c) => [c.runId, c.queuedAhead]))
      expect(ahead).toEqual({ [b1.runId]: 0, [c1.runId]: 1, [a2.runId]: 2, [b2.runId]: 3 })
      expect(calls.every((c) => c.waitedMs === 100 && c.lane === "main")).toBe(true)
      yield* TestClock.adjust(50)
      yield* g.release
      for (const f of [b1, c1, a2, b2]) yield* f.await
      const starts = calls.slice(4)
      expect(starts.map((c) => c.runId)).toEqual([b1.runId, c1.runId, a2.runId, b2.runId])
      expect(starts.every((c) => c.queuedAhead === 0 && c.waitedMs === 150)).toBe(true)
      expect(calls).toHaveLength(8)
    }))

  it.effect("onWait's queuedAhead follows the real start order with priorities", () =>
    Effect.gen(function*() {
      const { calls, g, queue } = yield* busyMain
      const started: Array<string> = []
      const run = (name: string) => Effect.sync(() => started.push(name))
      const b = yield* queue.dispatch("main", "b", run("b"))
      const c = yield* queue.dispatch("main", "c", run("c"), { priority: 5 })
      const d = yield* queue.dispatch("main", "d", run("d"), { priority: 1 })
      const c2 = yield* queue.dispatch("main", "c", run("c2"), { priority: 9 })
      yield* TestClock.adjust(100)
      const ahead = Object.fromEntries(calls.map((x) => [x.runId, x.queuedAhead]))
      yield* g.release
      for (const f of [b, c, d, c2]) yield* f.await
      // c (5) first; then c2 (9, c's next task) beats d (1) and b (0); then d, then b
      expect(started).toEqual(["c", "c2", "d", "b"])
      expect(ahead).toEqual({ [c.runId]: 0, [c2.runId]: 1, [d.runId]: 2, [b.runId]: 3 })
    }))

  it.effect("onWait is not called for a task that starts before warnAfterMs, nor for a lane without it", () =>
    Effect.gen(function*() {
      const { calls, g, queue } = yield* busyMain
      const quick = yield* queue.dispatch("main", "b", Effect.void)
      const h = yield* gated("cron")
      yield* queue.dispatch("heartbeat", "h", h.task)
      const noWarn = yield* queue.dispatch("heartbeat", "h", Effect.void)
      yield* TestClock.adjust(99)
      yield* g.release
      yield* quick.await
      yield* TestClock.adjust(10_000)
      yield* h.release
      yield* noWarn.await
      expect(calls).toEqual([])
    }))

  it.effect("a throwing onWait is logged and changes nothing", () => {
    const logs = captureLogs()
    return Effect.gen(function*() {
      const queue = yield* makeQueue({
        lanes: { main: { concurrent: 1, queued: 8, warnAfterMs: 10 } },
        onWait: () => {
          throw new Error("boom")
        }
      })
      const g = yield* gated("a")
      yield* queue.dispatch("main", "a", g.task)
      yield* g.started
      const f = yield* queue.dispatch("main", "b", Effect.succeed("b"))
      yield* TestClock.adjust(10)
      yield* g.release
      expect(yield* f.await).toBe("b")
      const thrown = logs.lines.filter((l) => l.message.includes("onWait threw"))
      expect(thrown).toHaveLength(2)
      expect(thrown[0]!.annotations).toMatchObject({ runId: f.runId, lane: "main", key: "b" })
    }).pipe(Effect.provide(logs.layer))
  })
})

describe("CommandQueue keepAlive", () => {
  it.effect("keepAlive restarts turnTimeoutMs from now: a task that makes progress is not cut, a stuck one is", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 2, queued: 8, turnTimeoutMs: 1_000 } } })
      const tick = yield* Deferred.make<void>()
      let beats = 0
      // progress: a beat every 600 ms (each under the timeout, all of them far over it), 5 beats
      const progressing = Effect.gen(function*() {
        for (let i = 0; i < 5; i++) {
          yield* Effect.sleep(600)
          yield* CommandQueue.keepAlive
          beats++
        }
        yield* Deferred.succeed(tick, undefined)
        return "done"
      })
      const alive = yield* queue.dispatch("main", "alive", progressing)
      // stuck: one beat, then nothing
      const stuck = yield* queue.dispatch(
        "main",
        "stuck",
        Effect.andThen(Effect.andThen(Effect.sleep(600), CommandQueue.keepAlive), Effect.never)
      )
      yield* TestClock.adjust(1_599)
      expect((yield* stuck.poll)._tag).toBe("None")
      yield* TestClock.adjust(1)
      expect(yield* Effect.flip(stuck.await)).toMatchObject({ reason: "timeout", stage: "running" })
      yield* TestClock.adjust(1_400)
      expect(yield* alive.await).toBe("done")
      expect(beats).toBe(5)
    }))

  it.effect("keepAlive from a fiber the task forked renews it too; outside a task it does nothing", () =>
    Effect.gen(function*() {
      yield* CommandQueue.keepAlive
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 8, turnTimeoutMs: 100 } } })
      const f = yield* queue.dispatch(
        "main",
        "k",
        Effect.gen(function*() {
          const child = yield* Effect.forkChild(Effect.gen(function*() {
            for (let i = 0; i < 3; i++) {
              yield* Effect.sleep(90)
              yield* CommandQueue.keepAlive
            }
          }))
          yield* Fiber.join(child)
          return "renewed by a child"
        })
      )
      yield* TestClock.adjust(270)
      expect(yield* f.await).toBe("renewed by a child")
    }))
})

describe("CommandQueue nested dispatch", () => {
  it.effect("nested dispatch: a task awaits a subagent task of another lane, under full caps", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({
        lanes: { main: { concurrent: 1, queued: 1 }, subagent: { concurrent: 1, queued: 0 } }
      })
      const g = yield* gated("sub busy")
      // the subagent lane is full (1 running, 0 queued): a nested dispatch is refused at once, never hangs
      yield* queue.dispatch("subagent", "other", g.task)
      yield* g.started
      const parent = yield* queue.dispatch(
        "main",
        "session",
        Effect.gen(function*() {
          const refused = yield* Effect.flip(queue.dispatch("subagent", "child", Effect.succeed("x")))
          yield* g.release
          yield* queue.waitForIdle({ lane: "subagent" })
          const child = yield* queue.dispatch("subagent", "child", Effect.succeed("child answer"))
          const reason = refused._tag === "AdmissionError" ? refused.reason : refused.message
          return `${refused._tag}: ${reason}; then ${yield* child.await}`
        })
      )
      // main is full too (1 running + 1 waiting): the nested work does not need a main slot
      yield* queue.dispatch("main", "other", Effect.void)
      expect(yield* parent.await).toBe("AdmissionError: full; then child answer")
    }))

  it.effect("awaiting a task of your own lane and key from inside a task fails RequestError at once (would wait for itself)", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const selfRef = yield* Deferred.make<CommandQueue.Future<unknown, unknown>>()
      const outer = yield* queue.dispatch(
        "main",
        "session",
        Effect.gen(function*() {
          const inner = yield* queue.dispatch("main", "session", Effect.succeed("inner"))
          const nested = yield* Effect.flip(inner.await)
          const timed = yield* Effect.flip(inner.awaitTimeout("1 hour"))
          const itself = yield* Effect.flip((yield* Deferred.await(selfRef)).await)
          // another key of the same lane is fine
          const other = yield* queue.dispatch("main", "other", Effect.succeed("other"))
          return { nested, timed, itself, other: yield* other.await, inner }
        })
      )
      yield* Deferred.succeed(selfRef, outer)
      const r = yield* outer.await
      for (const e of [r.nested, r.timed, r.itself]) {
        expect(e).toBeInstanceOf(RequestError)
        expect(e).toMatchObject({ lane: "main", key: "session" })
        expect((e as RequestError).message).toContain("would wait for itself")
      }
      expect(r.other).toBe("other")
      // from outside, the same future is awaited normally
      expect(yield* r.inner.await).toBe("inner")
    }))
})
