/**
 * createLanes, rule by rule (shared/spec/lanes.md). Deterministic: activations wait on gates the
 * test opens, the test waits on conditions over recorded events, time comes from TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Fiber } from "effect"
import { type ActivationExit, createLanes, LaneQueueFull, LanesClosed } from "../../src/queue/index.js"
import { PENDING, RunInline } from "../../src/queue/lanes/entry.js"
import { ALONE_FROM } from "../../src/queue/lanes/keyTable.js"
import { createLanesInternal } from "../../src/queue/lanes/scheduler.js"
import { idle, lanesWith, makeProbe } from "./Lanes.probe.js"

describe("Lanes: the wake table", () => {
  it.effect("wake on an idle key with a free slot and no key waiting returns started and starts it", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 2 })
      expect(yield* lanes.wake("a")).toBe("started")
      yield* probe.started("a")
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: 0, keys: 1 })
    }))

  it.effect("wake on an idle key with no free slot returns queued and joins the tail", () =>
    Effect.gen(function*() {
      const { lanes } = yield* lanesWith({ maxConcurrent: 1 })
      expect(yield* lanes.wake("a")).toBe("started")
      expect(yield* lanes.wake("b")).toBe("queued")
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: 1, keys: 2 })
    }))

  it.effect("wake on a queued key returns coalesced and changes nothing", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      expect(yield* lanes.wake("b")).toBe("coalesced")
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: 1, keys: 2 })
      yield* probe.started("a")
      yield* probe.release("a")
      yield* probe.started("b")
      yield* probe.release("b")
      yield* probe.exited("b")
      expect(probe.count("start:b")).toBe(1)
    }))

  it.effect("wake on a running key with no follow-up owed returns queued and owes one follow-up", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 2 })
      yield* lanes.wake("a")
      yield* probe.started("a")
      expect(yield* lanes.wake("a")).toBe("queued")
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: 1, keys: 1 })
      yield* probe.release("a")
      yield* probe.started("a", 2)
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: 0, keys: 1 })
      yield* probe.release("a")
      yield* probe.exited("a", 2)
      expect(probe.count("start:a")).toBe(2)
    }))

  it.effect("wake on a running key with a follow-up owed returns coalesced", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("a")
      yield* probe.started("a")
      expect(yield* lanes.wake("a")).toBe("queued")
      expect(yield* lanes.wake("a")).toBe("coalesced")
      expect(yield* lanes.wake("a")).toBe("coalesced")
      yield* probe.release("a")
      yield* probe.started("a", 2)
      yield* probe.release("a")
      yield* probe.exited("a", 2)
      expect(probe.count("start:a")).toBe(2)
      expect(yield* idle(lanes)).toEqual({ running: 0, waiting: 0, keys: 0 })
    }))

  it.effect("wake on closed lanes fails with LanesClosed", () =>
    Effect.gen(function*() {
      const { lanes } = yield* lanesWith()
      yield* lanes.close
      const error = yield* Effect.flip(lanes.wake("a"))
      expect(error).toBeInstanceOf(LanesClosed)
      expect(error._tag).toBe("LanesClosed")
    }))

  it.effect("wake never waits for an activation", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      // activations of "a" never end unless released; wake still returns at once for every row
      expect(yield* lanes.wake("a")).toBe("started")
      yield* probe.started("a")
      expect(yield* lanes.wake("a")).toBe("queued")
      expect(yield* lanes.wake("b")).toBe("queued")
      expect(probe.count("start:b")).toBe(0)
    }))

  it.effect("every wake that arrives before an activation starts is served by it", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("x")
      const results = []
      for (let i = 0; i < 5; i++) results.push(yield* lanes.wake("a"))
      expect(results).toEqual(["queued", "coalesced", "coalesced", "coalesced", "coalesced"])
      yield* probe.started("x")
      yield* probe.release("x")
      yield* probe.started("a")
      yield* probe.release("a")
      yield* probe.exited("a")
      expect(probe.count("start:a")).toBe(1)
    }))
})

describe("Lanes: the bound (maxQueued)", () => {
  it.effect("a wake that would add a waiting key when maxQueued keys already wait fails with LaneQueueFull", () =>
    Effect.gen(function*() {
      const { lanes } = yield* lanesWith({ maxConcurrent: 1, maxQueued: 2 })
      yield* lanes.wake("run")
      expect(yield* lanes.wake("q1")).toBe("queued")
      expect(yield* lanes.wake("q2")).toBe("queued")
      const error = yield* Effect.flip(lanes.wake("q3"))
      expect(error).toBeInstanceOf(LaneQueueFull)
      expect(error).toMatchObject({ _tag: "LaneQueueFull", key: "q3", maxQueued: 2 })
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: 2, keys: 3 })
    }))

  it.effect("an owed follow-up counts as waiting and is refused when maxQueued keys already wait", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 2, maxQueued: 1 })
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* probe.started("a")
      yield* probe.started("b")
      expect(yield* lanes.wake("a")).toBe("queued")
      expect(yield* lanes.stats).toEqual({ running: 2, waiting: 1, keys: 2 })
      const error = yield* Effect.flip(lanes.wake("b"))
      expect(error).toMatchObject({ _tag: "LaneQueueFull", key: "b", maxQueued: 1 })
      expect(yield* Effect.flip(lanes.wake("c"))).toMatchObject({ _tag: "LaneQueueFull", key: "c" })
    }))

  it.effect("a coalesced wake never fails for the bound", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1, maxQueued: 2 })
      yield* lanes.wake("a")
      yield* probe.started("a")
      expect(yield* lanes.wake("a")).toBe("queued")
      expect(yield* lanes.wake("b")).toBe("queued")
      expect(yield* lanes.wake("a")).toBe("coalesced")
      expect(yield* lanes.wake("b")).toBe("coalesced")
    }))

  it.effect("maxQueued 0 allows no waiting at all: only wakes that start (or coalesce) succeed", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1, maxQueued: 0 })
      expect(yield* lanes.wake("a")).toBe("started")
      yield* probe.started("a")
      expect(yield* Effect.flip(lanes.wake("a"))).toMatchObject({ _tag: "LaneQueueFull", maxQueued: 0 })
      expect(yield* Effect.flip(lanes.wake("b"))).toMatchObject({ _tag: "LaneQueueFull", maxQueued: 0 })
      yield* probe.release("a")
      yield* idle(lanes)
      expect(yield* lanes.wake("b")).toBe("started")
    }))

  it.effect("without maxQueued the number of waiting keys is unbounded, one entry per key", () =>
    Effect.gen(function*() {
      const { lanes } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("run")
      for (let i = 0; i < 20_000; i++) yield* lanes.wake(`k${i}`)
      for (let i = 0; i < 20_000; i++) yield* lanes.wake(`k${i}`)
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: 20_000, keys: 20_001 })
    }))
})

describe("Lanes: keys queued alone, without an entry (waiting.ts)", () => {
  /** Lanes that queue a new string key alone behind `aloneFrom` waiting keys, each start recorded. */
  const aloneLanes = (maxConcurrent: number, aloneFrom?: number) =>
    Effect.gen(function*() {
      const probe = makeProbe<string>()
      const lanes = yield* createLanesInternal<string, string>(
        { maxConcurrent, activate: probe.activate, onExit: probe.onExit },
        aloneFrom === undefined ? {} : { aloneFrom }
      )
      return { lanes, probe }
    })
  const starts = (probe: ReturnType<typeof makeProbe<string>>) =>
    probe.events.filter((e) => e.startsWith("start:")).map((e) => e.slice(6))

  it.effect("first come, first served across the FIFO, keys alone and entries queued by place", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* aloneLanes(1, 1)
      yield* lanes.wake("x")
      yield* probe.started("x")
      yield* lanes.wake("a") // the FIFO
      yield* probe.release("x") // "x" stays IDLE in the table ("a" is held)
      yield* probe.started("a")
      yield* lanes.wake("b") // the FIFO
      yield* lanes.wake("c") // alone, at place 1
      yield* lanes.wake("x") // its IDLE entry, queued by place behind "c"
      yield* lanes.wake("d") // alone
      expect(yield* lanes.wake("c")).toBe("coalesced")
      expect(yield* lanes.wake("x")).toBe("coalesced")
      yield* lanes.cancel("x") // its place goes stale...
      expect(yield* lanes.wake("x")).toBe("queued") // ... and it joins the tail again, behind "d"
      expect(yield* lanes.wake("f")).toBe("queued") // alone
      yield* lanes.cancel("f") // its entry is made to be dropped
      expect(yield* lanes.wake("e")).toBe("queued")
      yield* lanes.wake("a") // a follow-up owed by a running key: behind every key queued by place
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: 6, keys: 6 })
      for (const [k, n] of [["a", 1], ["b", 1], ["c", 1], ["d", 1], ["x", 2], ["e", 1], ["a", 2]] as const) {
        yield* probe.started(k, n)
        yield* probe.release(k)
      }
      yield* idle(lanes)
      expect(starts(probe)).toEqual(["x", "a", "b", "c", "d", "x", "e", "a"])
      expect(probe.events.filter((e) => e.startsWith("exit:x:") || e.startsWith("exit:f:"))).toEqual([
        "exit:x:ActivationSucceeded",
        "exit:x:ActivationInterrupted:cancel:false",
        "exit:f:ActivationInterrupted:cancel:false",
        "exit:x:ActivationSucceeded"
      ])
    }))

  it.effect("a burst past ALONE_FROM: every key served once in order, coalesced and cancelled ones too; close drops the rest", () =>
    Effect.gen(function*() {
      // past BURST_HELD held keys too: entries released then leave tombstones (keyTable.ts), until a
      // new key sweeps them out (the records of the keys still alone are renumbered, their places follow)
      const n = ALONE_FROM + 4_000
      const served = 8_500
      const stopAt = `k${served}`
      const started: Array<string> = []
      const exits: Array<ActivationExit<string, never>> = []
      const gate = yield* Deferred.make<void>()
      const lanes = yield* createLanesInternal<string>({
        maxConcurrent: 1,
        activate: (key) => {
          started.push(key)
          return key === "run" ? Deferred.await(gate) : key === stopAt ? Effect.never : Effect.void
        },
        onExit: (exit) => void exits.push(exit)
      }, {})
      yield* lanes.wake("run")
      for (let i = 0; i < n; i++) expect(yield* lanes.wake(`k${i}`)).toBe("queued")
      for (let i = 0; i < n; i += 7) expect(yield* lanes.wake(`k${i}`)).toBe("coalesced")
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: n, keys: n + 1 })
      // a key alone cancelled, then woken again: once, at the tail
      const again = `k${n - 100}`
      yield* lanes.cancel(again)
      expect(yield* lanes.wake(again)).toBe("queued")
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: n, keys: n + 1 })
      yield* Deferred.succeed(gate, undefined)
      for (let turn = 0; turn < 100_000 && started.length < served + 2; turn++) yield* Effect.yieldNow
      expect(started).toEqual(["run", ...Array.from({ length: served + 1 }, (_, i) => `k${i}`)])
      expect(yield* lanes.wake("late")).toBe("queued") // sweeps: more IDLE entries and tombstones than held keys + 4,096
      expect(yield* lanes.wake(`k${served + 1}`)).toBe("coalesced")
      expect(yield* lanes.wake(again)).toBe("coalesced")
      yield* lanes.close
      // every key still queued is reported dropped, the cancelled one twice (its cancel, then the close)
      const dropped = exits.filter((e) => e._tag === "ActivationInterrupted" && !e.started).map((e) => e.key)
      const rest = Array.from({ length: n - served - 1 }, (_, i) => `k${served + 1 + i}`).filter((k) => k !== again)
      expect(dropped).toEqual([again, ...rest, again, "late"])
      expect(exits.filter((e) => e._tag === "ActivationSucceeded").length).toBe(served + 1)
      expect(yield* lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
    }))
})

describe("Lanes: order", () => {
  it.effect("a freed slot goes to the key that waited longest", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("run")
      for (const k of ["c", "a", "d", "b"]) yield* lanes.wake(k)
      yield* lanes.wake("a") // coalesced: keeps its place
      for (const k of ["run", "c", "a", "d", "b"]) {
        yield* probe.started(k)
        yield* probe.release(k)
      }
      yield* idle(lanes)
      expect(probe.events.filter((e) => e.startsWith("start:"))).toEqual(
        ["start:run", "start:c", "start:a", "start:d", "start:b"]
      )
    }))

  it.effect("an owed follow-up waits behind keys queued meanwhile", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("a")
      yield* probe.started("a")
      expect(yield* lanes.wake("a")).toBe("queued") // follow-up owed first...
      yield* lanes.wake("b") // ...but b is queued meanwhile
      yield* lanes.wake("c")
      for (const [k, n] of [["a", 1], ["b", 1], ["c", 1], ["a", 2]] as const) {
        yield* probe.started(k, n)
        yield* probe.release(k)
      }
      yield* idle(lanes)
      expect(probe.events.filter((e) => e.startsWith("start:"))).toEqual(
        ["start:a", "start:b", "start:c", "start:a"]
      )
    }))

  it.effect("one busy key cannot starve the others", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("busy")
      yield* lanes.wake("other")
      for (let n = 1; n <= 3; n++) {
        yield* probe.started("busy", n)
        yield* lanes.wake("busy")
        yield* probe.release("busy")
        yield* probe.started("other", n)
        yield* lanes.wake("other")
        yield* probe.release("other")
      }
      expect(probe.events.filter((e) => e.startsWith("start:")).slice(0, 6)).toEqual(
        ["start:busy", "start:other", "start:busy", "start:other", "start:busy", "start:other"]
      )
    }))
})

describe("Lanes: end of an activation", () => {
  it.effect("at most one activation per key and at most maxConcurrent activations run at once", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 2 })
      for (const k of ["a", "b", "a", "c", "b", "d"]) yield* lanes.wake(k)
      yield* probe.started("a")
      yield* probe.started("b")
      expect(yield* lanes.stats).toEqual({ running: 2, waiting: 4, keys: 4 })
      expect(probe.count("start:c")).toBe(0)
      expect(probe.count("start:a")).toBe(1)
    }))

  it.effect("the activation runs in a Scope of its own, with the context that createLanes ran in", () =>
    Effect.gen(function*() {
      class Greeting extends Context.Service<Greeting, string>()("test/Greeting") {}
      const seen = yield* Deferred.make<string>()
      const scopes: Array<unknown> = []
      const outer = yield* Effect.scope
      const lanes = yield* createLanes<string, never, Greeting>({
        maxConcurrent: 1,
        activate: (key) =>
          Effect.gen(function*() {
            scopes.push(yield* Effect.scope)
            yield* Deferred.succeed(seen, `${yield* Greeting} ${key}`)
          })
      }).pipe(Effect.provideService(Greeting, "hello"))
      yield* lanes.wake("a")
      expect(yield* Deferred.await(seen)).toBe("hello a")
      expect(scopes[0]).not.toBe(outer)
    }))

  it.effect("finalizers of an interrupted activation run before the slot passes on", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      const gate = yield* Deferred.make<void>()
      probe.finalGates.set("a", gate)
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* probe.started("a")
      const cancel = yield* Effect.forkChild(lanes.cancel("a"))
      yield* probe.until(() => probe.count("closing:a") === 1)
      expect(probe.count("start:b")).toBe(0)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(cancel)
      yield* probe.started("b")
      expect(probe.at("final:a")).toBeLessThan(probe.at("exit:a:ActivationInterrupted:cancel:true"))
      expect(probe.at("exit:a:ActivationInterrupted:cancel:true")).toBeLessThan(probe.at("start:b"))
    }))

  it.effect("onExit of one activation completes before the next activation of that key starts", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 2 })
      const gate = yield* Deferred.make<void>()
      probe.setOnExitHook(() => Effect.andThen(Effect.sync(() => probe.push("onExit-entered")), Deferred.await(gate)))
      yield* lanes.wake("a")
      yield* probe.started("a")
      yield* lanes.wake("a") // follow-up owed
      yield* probe.release("a")
      yield* probe.until(() => probe.count("onExit-entered") === 1)
      expect(probe.count("start:a")).toBe(1)
      expect(yield* lanes.stats).toMatchObject({ running: 1, waiting: 1 })
      yield* Deferred.succeed(gate, undefined)
      yield* probe.started("a", 2)
      expect(probe.at("exit:a:ActivationSucceeded")).toBeLessThan(probe.at("start:a", 2))
    }))

  it.effect("the slot passes on only after onExit returns", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      const gate = yield* Deferred.make<void>()
      probe.setOnExitHook((exit) =>
        exit.key === "a"
          ? Effect.andThen(Effect.sync(() => probe.push("onExit-entered")), Deferred.await(gate))
          : Effect.void
      )
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* probe.started("a")
      yield* probe.release("a")
      yield* probe.until(() => probe.count("onExit-entered") === 1)
      expect(probe.count("start:b")).toBe(0)
      yield* Deferred.succeed(gate, undefined)
      yield* probe.started("b")
      expect(probe.at("exit:a:ActivationSucceeded")).toBeLessThan(probe.at("start:b"))
    }))

  it.effect("a wake from inside activate or onExit owes a follow-up that runs after it", () =>
    Effect.gen(function*() {
      const events: Array<string> = []
      const done = yield* Deferred.make<void>()
      let runs = 0
      const lanes: { wake: (k: string) => Effect.Effect<unknown, unknown> } = { wake: () => Effect.void }
      const wakeOrDie = (k: string) => Effect.orDie(lanes.wake(k))
      const real = yield* createLanes<string>({
        maxConcurrent: 1,
        activate: (key) =>
          Effect.gen(function*() {
            runs++
            events.push(`start:${key}:${runs}`)
            if (runs === 1) events.push(`wake-in-activate:${String(yield* wakeOrDie(key))}`)
          }),
        onExit: (exit) =>
          Effect.gen(function*() {
            events.push(`exit:${exit.key}:${runs}`)
            if (runs === 2) events.push(`wake-in-onExit:${String(yield* wakeOrDie(exit.key))}`)
            if (runs === 3) yield* Deferred.succeed(done, undefined)
          })
      })
      lanes.wake = real.wake
      yield* real.wake("a")
      yield* Deferred.await(done)
      yield* idle(real)
      expect(events).toEqual([
        "start:a:1",
        "wake-in-activate:queued",
        "exit:a:1",
        "start:a:2",
        "exit:a:2",
        "wake-in-onExit:queued",
        "start:a:3",
        "exit:a:3"
      ])
    }))
})

describe("Lanes: activations start after the caller's synchronous code, never starving the event loop", () => {
  it.effect("wake never runs an activation in the caller's stack", () =>
    Effect.gen(function*() {
      let ran = 0
      const lanes = yield* createLanes<string>({ maxConcurrent: 4, activate: () => Effect.sync(() => void ran++) })
      expect(yield* lanes.wake("a")).toBe("started")
      expect(yield* lanes.wake("b")).toBe("started")
      expect(ran).toBe(0)
      yield* idle(lanes)
      expect(ran).toBe(2)
    }))

  it.effect("activations that end at once and wake their own key forever leave the event loop free", () =>
    Effect.gen(function*() {
      let runs = 0
      const self: { wake: (k: string) => Effect.Effect<unknown, unknown> } = { wake: () => Effect.void }
      const lanes = yield* createLanes<string>({
        maxConcurrent: 2,
        activate: (key) =>
          Effect.suspend(() => {
            runs++
            return Effect.ignore(self.wake(key))
          })
      })
      self.wake = lanes.wake
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      // a macrotask still gets its turn while the chain of synchronous activations goes on
      yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
      const seen = runs
      yield* Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))
      expect(seen).toBeGreaterThan(0)
      expect(runs).toBeGreaterThan(seen)
      yield* lanes.close
      expect(yield* lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
    }))
})

describe("Lanes: long synchronous activations", () => {
  it.effect("an activation that runs synchronously for long holds the event loop only that long", () =>
    Effect.gen(function*() {
      const events: Array<string> = []
      const busy = (ms: number) => {
        const end = performance.now() + ms
        while (performance.now() < end) {
          // a synchronous activation, longer than the start loop's time budget
        }
      }
      const lanes = yield* createLanes<string>({
        maxConcurrent: 4,
        activate: (key) =>
          Effect.sync(() => {
            busy(6)
            events.push(`run:${key}`)
          })
      })
      for (const key of ["a", "b", "c", "d"]) yield* lanes.wake(key)
      setImmediate(() => events.push("macrotask"))
      yield* idle(lanes)
      // the macrotask queued before any activation ran gets its turn before the second one runs
      expect(events.indexOf("macrotask")).toBe(1)
      expect(events.filter((e) => e.startsWith("run:"))).toEqual(["run:a", "run:b", "run:c", "run:d"])
    }))
})

describe("Lanes (internal): inline work, as the command queue uses it", () => {
  const inlineLanes = (maxConcurrent: number, activate: (key: string) => unknown) =>
    createLanesInternal<string>(
      { maxConcurrent, activate: activate as (key: string) => Effect.Effect<unknown> },
      { uninterruptibleWork: true, inlineWork: true }
    )

  it.effect("inline work runs when its turn comes, never in wake's caller, and hands its slot on", () =>
    Effect.gen(function*() {
      const ran: Array<string> = []
      const lanes = yield* inlineLanes(1, (key) => ({ [RunInline]: () => (ran.push(key), Effect.void) }))
      expect(yield* lanes.wake("a")).toBe("started")
      expect(yield* lanes.wake("b")).toBe("queued")
      expect(ran).toEqual([])
      yield* idle(lanes)
      expect(ran).toEqual(["a", "b"])
    }))

  it.effect("what inline work leaves to do runs in a fiber, and the slot passes on after it", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const events: Array<string> = []
      const lanes = yield* inlineLanes(1, (key) => ({
        [RunInline]: () => {
          events.push(`run:${key}`)
          return key === "a"
            ? Effect.andThen(Deferred.await(gate), Effect.sync(() => void events.push("a:rest")))
            : Effect.void
        }
      }))
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* Effect.yieldNow
      expect(events).toEqual(["run:a"])
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: 1, keys: 2 })
      yield* Deferred.succeed(gate, undefined)
      yield* idle(lanes)
      expect(events).toEqual(["run:a", "a:rest", "run:b"])
    }))

  it.effect("inline work that returns PENDING holds its slot without a fiber until endInline; cancel and close wait for it", () =>
    Effect.gen(function*() {
      const ran: Array<string> = []
      const lanes = yield* inlineLanes(1, (key) => ({ [RunInline]: () => (ran.push(key), PENDING) }))
      // if an expectation fails, the activations still end, so that closing the lanes does not wait forever
      const endAll = Effect.sync(() => ["a", "b"].forEach((k) => lanes.endInline(k)))
      yield* Effect.addFinalizer(() => Effect.andThen(endAll, Effect.andThen(Effect.yieldNow, endAll)))
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* Effect.yieldNow
      expect(ran).toEqual(["a"])
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: 1, keys: 2 })
      // cancel of a pending inline activation returns only once it has ended
      const canceling = yield* Effect.forkChild(lanes.cancel("a"))
      yield* Effect.yieldNow
      expect(canceling.pollUnsafe()).toBeUndefined()
      lanes.endInline("a")
      yield* Fiber.join(canceling)
      yield* Effect.yieldNow
      expect(ran).toEqual(["a", "b"])
      // close waits for it too
      const closing = yield* Effect.forkChild(lanes.close)
      yield* Effect.yieldNow
      expect(closing.pollUnsafe()).toBeUndefined()
      lanes.endInline("b")
      yield* Fiber.join(closing)
      expect(yield* lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
    }))

  it.effect("inline work that throws is a defect of its activation: the slot still passes on", () =>
    Effect.gen(function*() {
      const ran: Array<string> = []
      const lanes = yield* inlineLanes(1, (key) => ({
        [RunInline]: () => {
          ran.push(key)
          if (key === "a") throw new Error("boom")
          return Effect.void
        }
      }))
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* idle(lanes)
      expect(ran).toEqual(["a", "b"])
      expect(yield* lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
    }))
})
