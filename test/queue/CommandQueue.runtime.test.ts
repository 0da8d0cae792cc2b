/** Lanes changed while the queue runs (lanes-runtime.md): addLane, removeLane, unknownLane, setLimits, pause, resume. */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { engineOf } from "../../src/queue/engine/Engine.js"
import type { QueueFailure } from "../../src/queue/index.js"
import { AdmissionError, RequestError } from "../../src/queue/index.js"
import { flushFibers, makeQueue, starts } from "./CommandQueue.helpers.js"

const laneOf = (lanes: ReadonlyArray<{ readonly lane: string }>, name: string) => lanes.find((l) => l.lane === name)

/** A lane `tools` added at run time (concurrent 1), task `a` running in it and `b` waiting. */
const addedLaneWithTwoTasks = Effect.gen(function*() {
  const queue = yield* makeQueue()
  const s = starts()
  yield* queue.addLane("tools", { concurrent: 1, queued: 4 })
  const running = yield* queue.dispatch("tools", "a", s.task("a"))
  const waiting = yield* queue.dispatch("tools", "b", s.task("b"))
  return { queue, s, running, waiting }
})

describe("addLane / removeLane", () => {
  it.effect("addLane adds a lane that takes work at once, with its limits in snapshot", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      yield* queue.addLane("subagents", { concurrent: 2, queued: 3, participation: "background" })
      expect(laneOf(yield* queue.snapshot, "subagents")).toMatchObject({
        concurrent: 2,
        queued: 3,
        participation: "background",
        running: 0,
        paused: false
      })
      const future = yield* queue.dispatch("subagents", "a", Effect.succeed(7))
      expect(yield* future.await).toBe(7)
    }))

  it.effect("addLane refuses a name in use and a bad limit with RequestError (field limits.concurrent)", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const taken = yield* Effect.flip(queue.addLane("main", { concurrent: 1, queued: 1 }))
      expect(taken).toBeInstanceOf(RequestError)
      expect(taken.message).toContain("it exists")
      const bad = yield* Effect.flip(queue.addLane("x", { concurrent: 0, queued: 1 }))
      expect(bad).toMatchObject({ _tag: "RequestError", field: "limits.concurrent" })
      expect(bad.message).toBe("Expected `limits.concurrent` to be an integer from 1 and up, got `0`")
      expect(laneOf(yield* queue.snapshot, "x")).toBeUndefined()
    }))

  it.effect("removeLane closes admission (AdmissionError closed), lets running tasks finish, then forgets the lane", () =>
    Effect.gen(function*() {
      const { queue, running, s, waiting } = yield* addedLaneWithTwoTasks
      const removed = yield* Effect.forkChild(queue.removeLane("tools"))
      yield* flushFibers
      const refused = yield* Effect.flip(queue.dispatch("tools", "c", Effect.void))
      expect(refused).toEqual(new AdmissionError({ lane: "tools", key: "c", reason: "closed" }))
      expect(laneOf(yield* queue.snapshot, "tools")).toMatchObject({ draining: true, running: 1, waiting: 1 })
      yield* s.release("a")
      yield* flushFibers
      expect(s.log).toEqual(["a", "b"]) // admitted work goes on, waiting work included
      yield* s.release("b")
      expect(yield* running.await).toBe("a")
      expect(yield* waiting.await).toBe("b")
      expect(yield* Fiber.join(removed)).toEqual({ completed: 2, canceled: 0, timedOut: false })
      expect(laneOf(yield* queue.snapshot, "tools")).toBeUndefined()
      const unknown = yield* Effect.flip(queue.dispatch("tools", "d", Effect.void))
      expect(unknown).toBeInstanceOf(RequestError)
      // the name is free again
      yield* queue.addLane("tools", { concurrent: 1, queued: 1 })
    }))

  it.effect("removeLane fails what is left at the deadline closed, and reports timedOut", () =>
    Effect.gen(function*() {
      const { queue, running, s, waiting } = yield* addedLaneWithTwoTasks
      const removed = yield* Effect.forkChild(queue.removeLane("tools", { timeoutMs: 1_000 }))
      yield* flushFibers
      yield* TestClock.adjust(999)
      expect(removed.pollUnsafe()).toBeUndefined()
      yield* TestClock.adjust(1)
      expect(yield* Fiber.join(removed)).toEqual({ completed: 0, canceled: 2, timedOut: true })
      for (const f of [running, waiting]) {
        const exit = yield* Effect.exit(f.await)
        expect(Exit.isFailure(exit) && exit.cause.reasons[0]).toMatchObject({
          error: expect.objectContaining({ _tag: "QueueFailure", reason: "closed" })
        })
      }
      const stageOf = (yield* Effect.flip(waiting.await)) as QueueFailure
      expect(stageOf.stage).toBe("queued")
      expect(s.log).toEqual(["a"])
      expect(laneOf(yield* queue.snapshot, "tools")).toBeUndefined()
    }))

  it.effect("main, heartbeat and cron cannot be removed (RequestError)", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      for (const lane of ["main", "heartbeat", "cron"]) {
        const error = yield* Effect.flip(queue.removeLane(lane))
        expect(error).toBeInstanceOf(RequestError)
        expect(error.message).toContain("other than `main`, `heartbeat` and `cron`")
      }
      expect((yield* queue.snapshot).map((l) => l.lane)).toEqual(["main", "heartbeat", "cron"])
      expect(yield* Effect.flip(queue.removeLane("nope"))).toBeInstanceOf(RequestError)
    }))
})

describe("unknownLane", () => {
  it.effect("without unknownLane a dispatch to an unknown lane is a RequestError, and makes no lane", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      expect(yield* Effect.flip(queue.dispatch("session:1", "k", Effect.void))).toBeInstanceOf(RequestError)
      expect((yield* queue.snapshot).length).toBe(3)
    }))

  it.effect("with unknownLane a dispatch to a new name makes that lane with these limits", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ unknownLane: { concurrent: 1, queued: 2, participation: "background" } })
      const future = yield* queue.dispatch("session:1", "k", Effect.succeed("ok"))
      expect(laneOf(yield* queue.snapshot, "session:1")).toMatchObject({
        concurrent: 1,
        queued: 2,
        participation: "background"
      })
      expect(yield* future.await).toBe("ok")
    }))

  it.effect("a lane made by unknownLane is forgotten once idle (no task, no key) for idleMs; a busy one is kept", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ unknownLane: { concurrent: 1, queued: 2, idleMs: 1_000 } })
      const s = starts()
      yield* Effect.andThen(queue.dispatch("idle", "k", Effect.void), flushFibers)
      const busy = yield* queue.dispatch("busy", "k", s.task("busy"))
      yield* flushFibers
      yield* TestClock.adjust(999)
      expect((yield* queue.snapshot).map((l) => l.lane)).toContain("idle")
      yield* TestClock.adjust(1)
      const names = (yield* queue.snapshot).map((l) => l.lane)
      expect(names).not.toContain("idle")
      expect(names).toContain("busy")
      yield* TestClock.adjust(5_000)
      expect((yield* queue.snapshot).map((l) => l.lane)).toContain("busy")
      yield* s.release("busy")
      yield* busy.await
      yield* TestClock.adjust(999)
      expect((yield* queue.snapshot).map((l) => l.lane)).toContain("busy")
      yield* TestClock.adjust(1)
      expect((yield* queue.snapshot).map((l) => l.lane)).toEqual(["main", "heartbeat", "cron"])
      // a forgotten name works again
      expect(yield* Effect.flatMap(queue.dispatch("idle", "k", Effect.succeed(1)), (f) => f.await)).toBe(1)
    }))

  it.effect("with unknownLane, a dispatch to a new name while draining fails AdmissionError closed; a bad key or option still fails RequestError, and no lane is made", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ unknownLane: { concurrent: 1, queued: 1 } })
      const bad = yield* Effect.flip(queue.dispatch("session:1", "", Effect.void))
      expect(bad).toBeInstanceOf(RequestError)
      expect((yield* queue.snapshot).map((l) => l.lane)).toEqual(["main", "heartbeat", "cron"])
      yield* queue.drain({ timeoutMs: 0 })
      const refused = yield* Effect.flip(queue.dispatch("session:2", "k", Effect.void))
      expect(refused).toBeInstanceOf(AdmissionError)
      expect(refused).toMatchObject({ lane: "session:2", key: "k", reason: "closed" })
      expect(yield* Effect.flip(queue.dispatch("session:2", "k", Effect.void, { turnTimeoutMs: -1 }))).toBeInstanceOf(
        RequestError
      )
      expect((yield* queue.snapshot).map((l) => l.lane)).toEqual(["main", "heartbeat", "cron"])
    }))

  it.effect(
    "20,000 unknown lane names cost no memory once idle: every lane and timer is gone after idleMs",
    () =>
      Effect.gen(function*() {
        const queue = yield* makeQueue({ unknownLane: { concurrent: 1, queued: 1 } })
        const engine = engineOf(queue)
        for (let i = 0; i < 20_000; i++) {
          const f = yield* queue.dispatch(`session:${i}`, "k", Effect.void)
          if (i % 5_000 === 0) yield* f.await
        }
        yield* flushFibers
        expect(engine.byName.size).toBe(20_003)
        yield* TestClock.adjust(60_000)
        expect(engine.byName.size).toBe(3)
        expect(engine.autoLanes.head).toBeUndefined()
        expect(engine.sweeper).toBeUndefined()
      }),
    60_000
  )
})

describe("setLimits / pause / resume", () => {
  it.effect("setLimits with a larger concurrent starts waiting tasks at once", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { tools: { concurrent: 1, queued: 8 } } })
      const s = starts()
      for (const k of ["a", "b", "c"]) yield* queue.dispatch("tools", k, s.task(k))
      expect(laneOf(yield* queue.snapshot, "tools")).toMatchObject({ running: 1, waiting: 2 })
      yield* queue.setLimits("tools", { concurrent: 3 })
      expect(laneOf(yield* queue.snapshot, "tools")).toMatchObject({ running: 3, waiting: 0, concurrent: 3 })
      yield* flushFibers
      expect(s.log).toEqual(["a", "b", "c"])
    }))

  it.effect("setLimits with a smaller concurrent lets running tasks finish and starts nothing until the lane is under it", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { tools: { concurrent: 3, queued: 8 } } })
      const s = starts()
      const futures = []
      for (const k of ["a", "b", "c", "d"]) futures.push(yield* queue.dispatch("tools", k, s.task(k)))
      yield* flushFibers
      yield* queue.setLimits("tools", { concurrent: 1 })
      expect(laneOf(yield* queue.snapshot, "tools")).toMatchObject({ running: 3, waiting: 1, concurrent: 1 })
      yield* s.release("a")
      yield* futures[0]!.await
      yield* s.release("b")
      yield* futures[1]!.await
      expect(laneOf(yield* queue.snapshot, "tools")).toMatchObject({ running: 1, waiting: 1 })
      expect(s.log).toEqual(["a", "b", "c"])
      yield* s.release("c")
      yield* futures[2]!.await
      yield* flushFibers
      expect(s.log).toEqual(["a", "b", "c", "d"])
    }))

  it.effect("setLimits with a smaller queued drops nothing admitted; only later admissions see it", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { tools: { concurrent: 1, queued: 4 } } })
      const s = starts()
      const futures = []
      for (const k of ["a", "b", "c", "d"]) futures.push(yield* queue.dispatch("tools", k, s.task(k)))
      yield* queue.setLimits("tools", { queued: 1 })
      expect(laneOf(yield* queue.snapshot, "tools")).toMatchObject({ running: 1, waiting: 3, queued: 1 })
      const full = yield* Effect.flip(queue.dispatch("tools", "e", Effect.void))
      expect(full).toMatchObject({ _tag: "AdmissionError", reason: "full" })
      for (const k of ["a", "b", "c", "d"]) yield* s.release(k)
      expect(yield* Effect.all(futures.map((f) => f.await))).toEqual(["a", "b", "c", "d"])
    }))

  it.effect("setLimits validates every value as make does, with field naming it (limits.concurrent)", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const cases = [
        [
          { concurrent: 0 },
          "limits.concurrent",
          "Expected `limits.concurrent` to be an integer from 1 and up, got `0`"
        ],
        [{ queued: 10_001 }, "limits.queued", "got `10001`"],
        [{ turnTimeoutMs: -1 }, "limits.turnTimeoutMs", "finite number greater than 0"],
        [{ agingMs: 0 }, "limits.agingMs", "got `0`"],
        [{ participation: "urgent" as never }, "limits.participation", "`blocking` or `background`"]
      ] as const
      for (const [limits, field, message] of cases) {
        const error = yield* Effect.flip(queue.setLimits("main", limits))
        expect(error).toMatchObject({ _tag: "RequestError", lane: "main", field })
        expect(error.message).toContain(message)
      }
      expect(laneOf(yield* queue.snapshot, "main")).toMatchObject({ concurrent: 4, queued: 64 })
      expect(yield* Effect.flip(queue.setLimits("nope", { concurrent: 1 }))).toBeInstanceOf(RequestError)
    }))

  it.effect("pause keeps admission open and starts nothing; running tasks go on; snapshot shows paused", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { tools: { concurrent: 2, queued: 2 } } })
      const s = starts()
      const a = yield* queue.dispatch("tools", "a", s.task("a"))
      yield* queue.pause("tools")
      expect(laneOf(yield* queue.snapshot, "tools")).toMatchObject({ paused: true, running: 1 })
      const b = yield* queue.dispatch("tools", "b", s.task("b"))
      expect(b.admission).toBe("queued")
      yield* queue.dispatch("tools", "c", s.task("c"))
      yield* queue.dispatch("tools", "d", s.task("d"))
      // admission stays open up to the bound, concurrent + queued
      expect(yield* Effect.flip(queue.dispatch("tools", "e", Effect.void))).toMatchObject({ reason: "full" })
      yield* s.release("a")
      expect(yield* a.await).toBe("a")
      yield* flushFibers
      expect(s.log).toEqual(["a"])
      expect(laneOf(yield* queue.snapshot, "tools")).toMatchObject({ paused: true, running: 0, waiting: 3 })
      expect(yield* Effect.flip(queue.pause("nope"))).toBeInstanceOf(RequestError)
    }))

  it.effect("resume starts what waits, longest waiter first", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { tools: { concurrent: 1, queued: 8 } } })
      const s = starts()
      yield* queue.pause("tools")
      for (const k of ["c", "a", "b"]) yield* queue.dispatch("tools", k, s.task(k))
      yield* flushFibers
      expect(s.log).toEqual([])
      yield* queue.resume("tools")
      expect(laneOf(yield* queue.snapshot, "tools")).toMatchObject({ paused: false, running: 1 })
      yield* flushFibers
      yield* s.release("c")
      yield* flushFibers
      yield* s.release("a")
      yield* flushFibers
      expect(s.log).toEqual(["c", "a", "b"])
    }))
})
