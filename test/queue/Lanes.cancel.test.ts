/**
 * createLanes: timeout, cancel, close and onExit (shared/spec/lanes.md). Deterministic: gates,
 * event conditions, TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Logger, Scope } from "effect"
import { TestClock } from "effect/testing"
import { type ActivationExit, createLanes, LanesClosed } from "../../src/queue/index.js"
import { idle, lanesRecordingExits, lanesWith, soleFailureCause } from "./Lanes.probe.js"

describe("Lanes: timeout", () => {
  it.effect("an activation running longer than turnTimeoutMs is interrupted and reported with reason timeout", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1, turnTimeoutMs: 1_000 })
      yield* lanes.wake("a")
      yield* probe.started("a")
      yield* TestClock.adjust(999)
      expect(probe.count("final:a")).toBe(0)
      yield* TestClock.adjust(1)
      yield* probe.exited("a")
      expect(probe.exits).toEqual([{ _tag: "ActivationInterrupted", key: "a", reason: "timeout", started: true }])
      expect(probe.at("final:a")).toBeLessThan(probe.at("exit:a:ActivationInterrupted:timeout:true"))
      expect(yield* idle(lanes)).toEqual({ running: 0, waiting: 0, keys: 0 })
    }))

  it.effect("after a timeout the lanes go on: an owed follow-up still runs, behind keys queued meanwhile", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1, turnTimeoutMs: 1_000 })
      yield* lanes.wake("a")
      yield* probe.started("a")
      expect(yield* lanes.wake("a")).toBe("queued")
      yield* lanes.wake("b")
      yield* TestClock.adjust(1_000)
      yield* probe.started("b")
      yield* probe.release("b")
      yield* probe.started("a", 2)
      yield* probe.release("a")
      yield* idle(lanes)
      expect(probe.exits.map((e) => e._tag)).toEqual(
        ["ActivationInterrupted", "ActivationSucceeded", "ActivationSucceeded"]
      )
    }))

  it.effect("the timeout counts per activation: a follow-up gets a full turnTimeoutMs of its own", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1, turnTimeoutMs: 1_000 })
      yield* lanes.wake("a")
      yield* probe.started("a")
      yield* lanes.wake("a")
      yield* TestClock.adjust(600)
      yield* probe.release("a")
      yield* probe.started("a", 2)
      yield* TestClock.adjust(600)
      expect(probe.exits).toHaveLength(1)
      yield* TestClock.adjust(400)
      yield* probe.exited("a", 2)
      expect(probe.exits[1]).toMatchObject({ _tag: "ActivationInterrupted", reason: "timeout" })
    }))
})

describe("Lanes: cancel", () => {
  it.effect("cancel of a queued key drops its entry and reports it as interrupted, not started", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* lanes.cancel("b")
      expect(probe.exits).toEqual([{ _tag: "ActivationInterrupted", key: "b", reason: "cancel", started: false }])
      expect(yield* lanes.stats).toEqual({ running: 1, waiting: 0, keys: 1 })
      yield* probe.started("a")
      yield* probe.release("a")
      yield* idle(lanes)
      expect(probe.count("start:b")).toBe(0)
    }))

  it.effect("cancel of a running key interrupts it and returns once its finalizers and onExit have run", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("a")
      yield* probe.started("a")
      yield* lanes.cancel("a")
      expect(probe.events).toEqual(["start:a", "final:a", "exit:a:ActivationInterrupted:cancel:true"])
      expect(yield* lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
    }))

  it.effect("cancel waits for slow finalizers and a slow onExit", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      const finalGate = yield* Deferred.make<void>()
      const exitGate = yield* Deferred.make<void>()
      probe.finalGates.set("a", finalGate)
      probe.setOnExitHook(() => Deferred.await(exitGate))
      yield* lanes.wake("a")
      yield* probe.started("a")
      const cancel = yield* Effect.forkChild(lanes.cancel("a"))
      yield* probe.until(() => probe.count("closing:a") === 1)
      expect(cancel.pollUnsafe()).toBeUndefined()
      yield* Deferred.succeed(finalGate, undefined)
      yield* probe.until(() => probe.count("final:a") === 1)
      expect(cancel.pollUnsafe()).toBeUndefined()
      yield* Deferred.succeed(exitGate, undefined)
      yield* Fiber.join(cancel)
      expect(probe.count("exit:a:ActivationInterrupted:cancel:true")).toBe(1)
    }))

  it.effect("cancel drops an owed follow-up and reports it as interrupted, not started", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("a")
      yield* probe.started("a")
      expect(yield* lanes.wake("a")).toBe("queued")
      yield* lanes.cancel("a")
      expect(probe.exits).toHaveLength(2)
      expect(probe.exits).toContainEqual({ _tag: "ActivationInterrupted", key: "a", reason: "cancel", started: false })
      expect(probe.exits).toContainEqual({ _tag: "ActivationInterrupted", key: "a", reason: "cancel", started: true })
      expect(yield* idle(lanes)).toEqual({ running: 0, waiting: 0, keys: 0 })
      expect(probe.count("start:a")).toBe(1)
    }))

  it.effect("cancelling an idle key does nothing", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.cancel("nobody")
      expect(probe.events).toEqual([])
      expect(yield* lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
    }))

  it.effect("after cancel the key is idle and can be woken again", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("a")
      yield* probe.started("a")
      yield* lanes.cancel("a")
      expect(yield* lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
      expect(yield* lanes.wake("a")).toBe("started")
      yield* probe.started("a", 2)
      yield* probe.release("a")
      yield* probe.exited("a", 2)
      expect(probe.exits[1]).toMatchObject({ _tag: "ActivationSucceeded", key: "a", value: "done" })
    }))

  it.effect("an activation that succeeded by itself is reported so even when cancel arrives while its Scope closes", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      const gate = yield* Deferred.make<void>()
      probe.finalGates.set("a", gate)
      yield* lanes.wake("a")
      yield* probe.started("a")
      yield* probe.release("a", "value")
      yield* probe.until(() => probe.count("closing:a") === 1)
      const cancel = yield* Effect.forkChild(lanes.cancel("a"))
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(cancel)
      expect(probe.exits).toEqual([{ _tag: "ActivationSucceeded", key: "a", value: "value" }])
    }))

  it.effect("an activation that failed by itself is reported so even when cancel arrives while its Scope closes", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      const gate = yield* Deferred.make<void>()
      probe.finalGates.set("a", gate)
      probe.behaviours.set("a", "fail")
      yield* lanes.wake("a")
      yield* probe.until(() => probe.count("closing:a") === 1)
      const cancel = yield* Effect.forkChild(lanes.cancel("a"))
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(cancel)
      expect(probe.exits).toHaveLength(1)
      const exit = probe.exits[0]!
      expect(exit._tag).toBe("ActivationFailed")
      if (exit._tag === "ActivationFailed") expect(Cause.hasFails(exit.cause)).toBe(true)
    }))

  it.effect("cancel of a key whose onExit is running waits for it and does not report it twice", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      const gate = yield* Deferred.make<void>()
      probe.setOnExitHook(() => Effect.andThen(Effect.sync(() => probe.push("onExit-entered")), Deferred.await(gate)))
      yield* lanes.wake("a")
      yield* probe.started("a")
      yield* probe.release("a")
      yield* probe.until(() => probe.count("onExit-entered") === 1)
      const cancel = yield* Effect.forkChild(lanes.cancel("a"))
      expect(cancel.pollUnsafe()).toBeUndefined()
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(cancel)
      expect(probe.exits).toEqual([{ _tag: "ActivationSucceeded", key: "a", value: "done" }])
      expect(yield* lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
    }))

  it.effect("cancel from inside the key's own activation does not deadlock and reports it cancelled", () =>
    Effect.gen(function*() {
      const exits: Array<ActivationExit<string, never>> = []
      const done = yield* Deferred.make<void>()
      const ref: { cancel: (k: string) => Effect.Effect<void> } = { cancel: () => Effect.void }
      const lanes = yield* createLanes<string>({
        maxConcurrent: 1,
        activate: (key) => Effect.andThen(ref.cancel(key), Effect.never),
        onExit: (exit) => Effect.andThen(Effect.sync(() => exits.push(exit)), Deferred.succeed(done, undefined))
      })
      ref.cancel = lanes.cancel
      yield* lanes.wake("a")
      yield* Deferred.await(done)
      expect(exits).toEqual([{ _tag: "ActivationInterrupted", key: "a", reason: "cancel", started: true }])
    }))
})

describe("Lanes: close", () => {
  it.effect("close drops the queue (reason close, not started), interrupts running activations and waits for them", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 2 })
      for (const k of ["a", "b", "c", "d"]) yield* lanes.wake(k)
      yield* probe.started("a")
      yield* probe.started("b")
      yield* lanes.wake("a") // owed follow-up: dropped too
      yield* lanes.close
      expect(probe.count("final:a")).toBe(1)
      expect(probe.count("final:b")).toBe(1)
      const byKey = (k: string) => probe.exits.filter((e) => e.key === k)
      expect(byKey("a")).toHaveLength(2)
      expect(byKey("a")).toContainEqual({ _tag: "ActivationInterrupted", key: "a", reason: "close", started: true })
      expect(byKey("a")).toContainEqual({ _tag: "ActivationInterrupted", key: "a", reason: "close", started: false })
      expect(byKey("b")).toEqual([{ _tag: "ActivationInterrupted", key: "b", reason: "close", started: true }])
      expect(byKey("c")).toEqual([{ _tag: "ActivationInterrupted", key: "c", reason: "close", started: false }])
      expect(byKey("d")).toEqual([{ _tag: "ActivationInterrupted", key: "d", reason: "close", started: false }])
      expect(probe.count("start:c")).toBe(0)
      expect(yield* lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
    }))

  it.effect("close is idempotent and every later wake fails with LanesClosed", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* lanes.close
      yield* lanes.close
      expect(probe.exits).toHaveLength(2)
      expect(yield* Effect.flip(lanes.wake("a"))).toBeInstanceOf(LanesClosed)
      expect(yield* Effect.flip(lanes.wake("z"))).toBeInstanceOf(LanesClosed)
    }))

  it.effect("a second close, while the first waits, also waits for the running activations", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      const gate = yield* Deferred.make<void>()
      probe.finalGates.set("a", gate)
      yield* lanes.wake("a")
      yield* probe.started("a")
      const first = yield* Effect.forkChild(lanes.close)
      yield* probe.until(() => probe.count("closing:a") === 1)
      const second = yield* Effect.forkChild(lanes.close)
      yield* Effect.yieldNow
      expect(second.pollUnsafe()).toBeUndefined()
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      yield* Fiber.join(second)
      expect(probe.exits).toHaveLength(1)
    }))

  it.effect("an activation that succeeded by itself is reported so even when close arrives while its Scope closes", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      const gate = yield* Deferred.make<void>()
      probe.finalGates.set("a", gate)
      yield* lanes.wake("a")
      yield* probe.started("a")
      yield* probe.release("a", "value")
      yield* probe.until(() => probe.count("closing:a") === 1)
      const close = yield* Effect.forkChild(lanes.close)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(close)
      expect(probe.exits).toEqual([{ _tag: "ActivationSucceeded", key: "a", value: "value" }])
    }))

  it.effect("close while onExit runs waits for onExit", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      const gate = yield* Deferred.make<void>()
      probe.setOnExitHook(() => Effect.andThen(Effect.sync(() => probe.push("onExit-entered")), Deferred.await(gate)))
      yield* lanes.wake("a")
      yield* probe.started("a")
      yield* probe.release("a")
      yield* probe.until(() => probe.count("onExit-entered") === 1)
      const close = yield* Effect.forkChild(lanes.close)
      expect(close.pollUnsafe()).toBeUndefined()
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(close)
      expect(probe.exits).toEqual([{ _tag: "ActivationSucceeded", key: "a", value: "done" }])
    }))

  it.effect("closing the Scope that created the lanes runs close", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 }).pipe(Scope.provide(scope))
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* probe.started("a")
      yield* Scope.close(scope, Exit.void)
      expect(probe.exits).toEqual([
        { _tag: "ActivationInterrupted", key: "b", reason: "close", started: false },
        { _tag: "ActivationInterrupted", key: "a", reason: "close", started: true }
      ])
      expect(yield* Effect.flip(lanes.wake("a"))).toBeInstanceOf(LanesClosed)
    }))
})

describe("Lanes: onExit", () => {
  it.effect("ActivationFailed covers a typed failure and a defect of activate alike; the Cause tells", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 2 })
      probe.behaviours.set("f", "fail")
      probe.behaviours.set("d", "die")
      yield* lanes.wake("f")
      yield* lanes.wake("d")
      yield* probe.exited("f")
      yield* probe.exited("d")
      const f = probe.exits.find((e) => e.key === "f")!
      const d = probe.exits.find((e) => e.key === "d")!
      expect(f._tag).toBe("ActivationFailed")
      expect(d._tag).toBe("ActivationFailed")
      if (f._tag === "ActivationFailed") expect(Cause.hasFails(f.cause)).toBe(true)
      if (d._tag === "ActivationFailed") expect(Cause.hasDies(d.cause)).toBe(true)
    }))

  it.effect("an activation that interrupts itself is ActivationFailed: ActivationInterrupted means the lanes cut it short", () =>
    Effect.gen(function*() {
      const { exits, lanes } = yield* lanesRecordingExits({ maxConcurrent: 1, activate: () => Effect.interrupt })
      yield* lanes.wake("a")
      yield* idle(lanes)
      expect(Cause.hasInterruptsOnly(soleFailureCause(exits))).toBe(true)
    }))

  it.effect("a defect raised by onExit (a throw or Effect.die) is logged as a warning and changes nothing else", () =>
    Effect.gen(function*() {
      const logs: Array<string> = []
      const logger = Logger.make((o) => {
        logs.push(`${o.logLevel}:${JSON.stringify(o.message)}`)
      })
      const started: Array<string> = []
      let n = 0
      const lanes = yield* createLanes<string>({
        maxConcurrent: 1,
        activate: (key) => Effect.sync(() => started.push(key)),
        onExit: () => {
          n++
          if (n === 1) throw new Error("onExit threw")
          if (n === 2) return Effect.die("onExit died")
        }
      }).pipe(Effect.provide(Logger.layer([logger])))
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* lanes.wake("c")
      yield* idle(lanes)
      expect(started).toEqual(["a", "b", "c"])
      expect(n).toBe(3)
      const warnings = logs.filter((l) => l.startsWith("Warn"))
      expect(warnings).toHaveLength(2)
      expect(warnings[0]).toContain("onExit")
    }))

  it.effect("onExit runs uninterruptibly: interrupting a cancel does not cut onExit short", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      const gate = yield* Deferred.make<void>()
      probe.setOnExitHook(() => Effect.andThen(Effect.sync(() => probe.push("onExit-entered")), Deferred.await(gate)))
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* probe.started("a")
      const cancel = yield* Effect.forkChild(lanes.cancel("b"))
      yield* probe.until(() => probe.count("onExit-entered") === 1)
      const interrupted = yield* Effect.forkChild(Fiber.interrupt(cancel))
      yield* Effect.yieldNow
      expect(probe.count("exit:b:ActivationInterrupted:cancel:false")).toBe(0)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(interrupted)
      expect(probe.count("exit:b:ActivationInterrupted:cancel:false")).toBe(1)
    }))

  it.effect("each activation and each dropped entry is reported exactly once", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      yield* lanes.wake("a")
      yield* probe.started("a")
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* lanes.wake("c")
      yield* lanes.cancel("b")
      yield* probe.release("a")
      yield* probe.started("c")
      yield* lanes.cancel("c")
      yield* probe.started("a", 2)
      yield* probe.release("a")
      yield* idle(lanes)
      yield* lanes.close
      expect(probe.exits.map((e) => `${e.key}:${e._tag}`).sort()).toEqual([
        "a:ActivationSucceeded",
        "a:ActivationSucceeded",
        "b:ActivationInterrupted",
        "c:ActivationInterrupted"
      ])
    }))
})

describe("Lanes: races", () => {
  it.effect("a wake while cancel waits for the activation to end owes a follow-up, and it runs", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      const gate = yield* Deferred.make<void>()
      probe.finalGates.set("a", gate)
      yield* lanes.wake("a")
      yield* probe.started("a")
      const cancel = yield* Effect.forkChild(lanes.cancel("a"))
      yield* probe.until(() => probe.count("closing:a") === 1)
      expect(yield* lanes.wake("a")).toBe("queued")
      probe.finalGates.delete("a")
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(cancel)
      yield* probe.started("a", 2)
      yield* probe.release("a")
      yield* idle(lanes)
      expect(probe.exits.map((e) => e._tag)).toEqual(["ActivationInterrupted", "ActivationSucceeded"])
    }))

  it.effect("a timeout that falls due while the Scope closes leaves a success reported as a success", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1, turnTimeoutMs: 1_000 })
      const gate = yield* Deferred.make<void>()
      probe.finalGates.set("a", gate)
      yield* lanes.wake("a")
      yield* probe.started("a")
      yield* TestClock.adjust(500)
      yield* probe.release("a", "in time")
      yield* probe.until(() => probe.count("closing:a") === 1)
      yield* TestClock.adjust(5_000)
      yield* Deferred.succeed(gate, undefined)
      yield* probe.exited("a")
      expect(probe.exits).toEqual([{ _tag: "ActivationSucceeded", key: "a", value: "in time" }])
    }))

  it.effect("cancel of a key whose activation has not run yet reports it interrupted (started, activate called)", () =>
    Effect.gen(function*() {
      const { lanes, probe } = yield* lanesWith({ maxConcurrent: 1 })
      expect(yield* lanes.wake("a")).toBe("started")
      yield* lanes.cancel("a") // before the activation's fiber first ran
      expect(probe.exits).toEqual([{ _tag: "ActivationInterrupted", key: "a", reason: "cancel", started: true }])
      expect(probe.count("start:a")).toBe(0)
      expect(yield* lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
    }))

  it.effect("cancel from inside the key's own activation reports its dropped follow-up too", () =>
    Effect.gen(function*() {
      const exits: Array<ActivationExit<string, never>> = []
      const ref: {
        lanes?: { wake: (k: string) => Effect.Effect<unknown, unknown>; cancel: (k: string) => Effect.Effect<void> }
      } = {}
      const done = yield* Deferred.make<void>()
      const lanes = yield* createLanes<string>({
        maxConcurrent: 1,
        activate: (key) =>
          Effect.gen(function*() {
            yield* Effect.orDie(ref.lanes!.wake(key)) // owes a follow-up
            yield* ref.lanes!.cancel(key)
            yield* Effect.never
          }),
        onExit: (exit) =>
          Effect.suspend(() => {
            exits.push(exit)
            return exits.length === 2 ? Deferred.succeed(done, undefined) : Effect.void
          })
      })
      ref.lanes = lanes
      yield* lanes.wake("a")
      yield* Deferred.await(done)
      yield* idle(lanes)
      expect(exits).toContainEqual({ _tag: "ActivationInterrupted", key: "a", reason: "cancel", started: false })
      expect(exits).toContainEqual({ _tag: "ActivationInterrupted", key: "a", reason: "cancel", started: true })
    }))

  it.effect("close from inside an activation reports every dropped entry and does not wait for itself", () =>
    Effect.gen(function*() {
      const ref: { close?: Effect.Effect<void> } = {}
      const { exits, lanes } = yield* lanesRecordingExits({
        maxConcurrent: 2,
        activate: (key) => (key === "closer" ? Effect.andThen(ref.close!, Effect.never) : Effect.never)
      })
      ref.close = lanes.close
      yield* lanes.wake("other")
      yield* lanes.wake("closer")
      yield* lanes.wake("q1")
      yield* lanes.wake("q2")
      yield* idle(lanes)
      expect(exits).toHaveLength(4)
      expect(exits).toContainEqual({ _tag: "ActivationInterrupted", key: "closer", reason: "close", started: true })
      expect(exits).toContainEqual({ _tag: "ActivationInterrupted", key: "other", reason: "close", started: true })
      expect(exits).toContainEqual({ _tag: "ActivationInterrupted", key: "q1", reason: "close", started: false })
      expect(exits).toContainEqual({ _tag: "ActivationInterrupted", key: "q2", reason: "close", started: false })
    }))

  it.effect("close from inside onExit does not deadlock", () =>
    Effect.gen(function*() {
      const ref: { close?: Effect.Effect<void> } = {}
      const exits: Array<string> = []
      const lanes = yield* createLanes<string>({
        maxConcurrent: 1,
        activate: () => Effect.void,
        onExit: (exit) =>
          Effect.andThen(
            Effect.sync(() => exits.push(`${exit.key}:${exit._tag}`)),
            exit.key === "a" ? ref.close! : Effect.void
          )
      })
      ref.close = lanes.close
      yield* lanes.wake("a")
      yield* lanes.wake("b")
      yield* idle(lanes)
      expect(exits).toEqual(["a:ActivationSucceeded", "b:ActivationInterrupted"])
      expect(yield* Effect.flip(lanes.wake("c"))).toBeInstanceOf(LanesClosed)
    }))
})
