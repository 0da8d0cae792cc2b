/** Capacity groups and priority with aging (lanes-runtime.md). */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import { LanesConfigInvalid, RequestError } from "../../src/queue/index.js"
import type { CommandQueue } from "../../src/queue/index.js"
import { flushFibers, makeQueue, starts } from "./CommandQueue.helpers.js"

/** heartbeat (1), cron (2) and subagents (2) under one budget of 2. */
const grouped = (concurrent = 2) =>
  makeQueue({
    lanes: { subagents: { concurrent: 2, queued: 8 } },
    groups: { background: { concurrent, lanes: ["heartbeat", "cron", "subagents"] } }
  })

/** Releases `name` and lets the queue hand the slot on. */
const finish = (s: ReturnType<typeof starts>, name: string) => Effect.andThen(s.release(name), flushFibers)

describe("capacity groups", () => {
  it.effect("a task of a grouped lane starts only when its lane and its group have a free slot", () =>
    Effect.gen(function*() {
      const queue = yield* grouped()
      const s = starts()
      yield* queue.dispatch("cron", "c1", s.task("c1"))
      yield* queue.dispatch("subagents", "s1", s.task("s1"))
      // the group is full: cron has a slot of its own left, but waits
      const c2 = yield* queue.dispatch("cron", "c2", s.task("c2"))
      expect(c2.admission).toBe("queued")
      // heartbeat has its own slot free: still waits for the group
      yield* queue.dispatch("heartbeat", "h1", s.task("h1"))
      yield* flushFibers
      expect(s.log).toEqual(["c1", "s1"])
      expect(yield* queue.groupSnapshot).toEqual([{ group: "background", concurrent: 2, running: 2, waiting: 2 }])
      // main is in no group and is not limited by it
      const m = yield* queue.dispatch("main", "m1", Effect.succeed("m"))
      expect(m.admission).toBe("started")
      expect(yield* m.await).toBe("m")
    }))

  it.effect("a freed group slot goes to the longest waiter among the group's lanes (no lane starves another)", () =>
    Effect.gen(function*() {
      const queue = yield* grouped(1)
      const s = starts()
      yield* queue.dispatch("subagents", "s0", s.task("s0"))
      // waiters in admission order, across lanes
      for (
        const [lane, k] of [["cron", "c1"], ["subagents", "s1"], ["heartbeat", "h1"], ["subagents", "s2"], [
          "cron",
          "c2"
        ]]
      ) {
        yield* queue.dispatch(lane!, k!, s.task(k!))
      }
      for (const k of ["s0", "c1", "s1", "h1", "s2"]) yield* finish(s, k)
      expect(s.log).toEqual(["s0", "c1", "s1", "h1", "s2", "c2"])
    }))

  it.effect("make validates groups: known lanes, a lane in at most one group, concurrent from 1 (LanesConfigInvalid)", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [CommandQueue.CommandQueueOptions, string, string]> = [
        [{ groups: { g: { concurrent: 0, lanes: ["cron"] } } }, "groups.g.concurrent", "got `0`"],
        [{ groups: { g: { concurrent: 1, lanes: ["nope"] } } }, "groups.g.lanes", "got `\"nope\"`"],
        [{ groups: { g: { concurrent: 1, lanes: [] } } }, "groups.g.lanes", "a non-empty array"],
        [
          { groups: { a: { concurrent: 1, lanes: ["cron"] }, b: { concurrent: 1, lanes: ["heartbeat", "cron"] } } },
          "groups.b.lanes",
          "at most one group, got `cron` in `a` and `b`"
        ]
      ]
      for (const [options, field, message] of cases) {
        const error = yield* Effect.flip(makeQueue(options))
        expect(error).toBeInstanceOf(LanesConfigInvalid)
        expect(error.field).toBe(field)
        expect(error.message).toContain(message)
      }
    }))

  it.effect("snapshot gives each lane its group, and groupSnapshot gives concurrent, running and waiting", () =>
    Effect.gen(function*() {
      const queue = yield* grouped()
      const lanes = yield* queue.snapshot
      expect(lanes.map((l) => [l.lane, l.group])).toEqual([
        ["main", undefined],
        ["heartbeat", "background"],
        ["cron", "background"],
        ["subagents", "background"]
      ])
      expect(yield* queue.groupSnapshot).toEqual([{ group: "background", concurrent: 2, running: 0, waiting: 0 }])
    }))

  it.effect("setGroupLimits: a larger budget starts waiting tasks at once, a smaller one lets running ones finish; validated", () =>
    Effect.gen(function*() {
      const queue = yield* grouped(1)
      const s = starts()
      for (const k of ["c1", "c2"]) yield* queue.dispatch("cron", k, s.task(k))
      yield* queue.dispatch("subagents", "s1", s.task("s1"))
      yield* queue.setGroupLimits("background", { concurrent: 3 })
      expect(yield* queue.groupSnapshot).toEqual([{ group: "background", concurrent: 3, running: 3, waiting: 0 }])
      yield* queue.setGroupLimits("background", { concurrent: 1 })
      yield* queue.dispatch("heartbeat", "h1", s.task("h1"))
      yield* finish(s, "c1")
      yield* finish(s, "c2")
      expect(s.log).toEqual(["c1", "c2", "s1"])
      yield* finish(s, "s1")
      expect(s.log).toEqual(["c1", "c2", "s1", "h1"])
      const bad = yield* Effect.flip(queue.setGroupLimits("background", { concurrent: 0 }))
      expect(bad).toMatchObject({ _tag: "RequestError", field: "limits.concurrent" })
      expect(yield* Effect.flip(queue.setGroupLimits("nope", { concurrent: 1 }))).toBeInstanceOf(RequestError)
    }))

  it.effect("a paused lane of a group starts nothing and lends its turn to the group's other lanes", () =>
    Effect.gen(function*() {
      const queue = yield* grouped(1)
      const s = starts()
      yield* queue.dispatch("subagents", "s0", s.task("s0"))
      yield* queue.pause("cron")
      yield* queue.dispatch("cron", "c1", s.task("c1"))
      yield* queue.dispatch("heartbeat", "h1", s.task("h1"))
      yield* finish(s, "s0")
      expect(s.log).toEqual(["s0", "h1"])
      yield* queue.resume("cron")
      yield* finish(s, "h1")
      expect(s.log).toEqual(["s0", "h1", "c1"])
    }))
})

describe("priority with aging", () => {
  const oneSlot = { lanes: { main: { concurrent: 1, queued: 16, agingMs: 1_000 } } }

  it.effect("a freed slot goes to the waiting key whose next task has the highest priority (default 0)", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue(oneSlot)
      const s = starts()
      yield* queue.dispatch("main", "busy", s.task("busy"))
      yield* queue.dispatch("main", "low", s.task("low"), { priority: -1 })
      yield* queue.dispatch("main", "none", s.task("none"))
      yield* queue.dispatch("main", "high", s.task("high"), { priority: 5 })
      yield* queue.dispatch("main", "mid", s.task("mid"), { priority: 2 })
      for (const k of ["busy", "high", "mid", "none"]) yield* finish(s, k)
      expect(s.log).toEqual(["busy", "high", "mid", "none", "low"])
    }))

  it.effect("aging: effective priority is priority + floor(waitedMs / agingMs), so a low task waits a bounded time behind a stream of high ones", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue(oneSlot)
      const s = starts()
      yield* queue.dispatch("main", "h0", s.task("h0"), { priority: 3 })
      yield* queue.dispatch("main", "low", s.task("low"))
      // a stream: every 500 ms a new priority-3 task arrives and the running one ends
      let i = 1
      while (!s.log.includes("low") && i < 50) {
        yield* queue.dispatch("main", `h${i}`, s.task(`h${i}`), { priority: 3 })
        yield* TestClock.adjust(500)
        yield* finish(s, s.log.at(-1)!)
        i++
      }
      // "low" ranks 0 + floor(w / 1000); a fresh "h" ranks 3 + floor(w' / 1000) with w' < 1000 at
      // most, and an older "h" waited less than "low": "low" wins once it waited 4 agingMs at most
      expect(s.log.indexOf("low")).toBeGreaterThan(1)
      const waitedMs = (i - 1) * 500
      expect(waitedMs).toBeGreaterThanOrEqual(3_000) // priority held it back this long
      expect(waitedMs).toBeLessThanOrEqual(4_000) // and aging no longer
    }))

  it.effect("tasks of one key stay in admission order whatever their priorities", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue(oneSlot)
      const s = starts()
      yield* queue.dispatch("main", "busy", s.task("busy"))
      yield* queue.dispatch("main", "k", s.task("k-first"), { priority: -5 })
      yield* queue.dispatch("main", "k", s.task("k-second"), { priority: 9 })
      yield* queue.dispatch("main", "other", s.task("other"), { priority: 1 })
      for (const k of ["busy", "other", "k-first"]) yield* finish(s, k)
      expect(s.log).toEqual(["busy", "other", "k-first", "k-second"])
    }))

  it.effect("ties go to the longest waiter", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue(oneSlot)
      const s = starts()
      yield* queue.dispatch("main", "busy", s.task("busy"))
      yield* queue.dispatch("main", "a", s.task("a"), { priority: 2 })
      yield* queue.dispatch("main", "b", s.task("b"), { priority: 2 })
      yield* queue.dispatch("main", "c", s.task("c"), { priority: 2 })
      for (const k of ["busy", "a", "b"]) yield* finish(s, k)
      expect(s.log).toEqual(["busy", "a", "b", "c"])
    }))

  it.effect("a priority that is not a finite number is a RequestError", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const error = yield* Effect.flip(queue.dispatch("main", "k", Effect.void, { priority: Number.NaN }))
      expect(error).toBeInstanceOf(RequestError)
      expect(error.message).toBe("Expected `priority` to be a finite number, got `NaN`")
    }))
})
