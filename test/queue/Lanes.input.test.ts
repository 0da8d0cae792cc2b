/**
 * createLanes: LanesConfigInvalid for every bad option, keys of any type, bad input that must not
 * crash the scheduler, and idle keys holding no state (shared/spec/lanes.md).
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect } from "effect"
import { createLanes, LanesConfigInvalid, MAX_QUEUED } from "../../src/queue/index.js"
import { idle, lanesRecordingExits, soleFailureCause } from "./Lanes.probe.js"

const activate = () => Effect.void
const invalid = (options: unknown) => Effect.flip(createLanes(options as never))

describe("Lanes: LanesConfigInvalid", () => {
  const cases: ReadonlyArray<readonly [string, Record<string, unknown>, string]> = [
    ["maxConcurrent", { maxConcurrent: 0 }, "Expected `maxConcurrent` to be an integer from 1 and up, got `0`"],
    ["maxConcurrent", { maxConcurrent: 1.5 }, "got `1.5`"],
    ["maxConcurrent", { maxConcurrent: -1 }, "got `-1`"],
    ["maxConcurrent", { maxConcurrent: Number.NaN }, "got `NaN`"],
    ["maxConcurrent", { maxConcurrent: Number.POSITIVE_INFINITY }, "got `Infinity`"],
    ["maxConcurrent", { maxConcurrent: "4" }, "got `\"4\"`"],
    ["maxConcurrent", { maxConcurrent: null }, "got `null`"],
    ["maxConcurrent", { maxConcurrent: undefined }, "got `undefined`"],
    ["maxQueued", { maxQueued: -1 }, "Expected `maxQueued` to be an integer from 0 through 10000, got `-1`"],
    ["maxQueued", { maxQueued: MAX_QUEUED + 1 }, "got `10001`"],
    ["maxQueued", { maxQueued: 2.5 }, "got `2.5`"],
    ["maxQueued", { maxQueued: Number.NaN }, "got `NaN`"],
    ["maxQueued", { maxQueued: Number.POSITIVE_INFINITY }, "got `Infinity`"],
    ["maxQueued", { maxQueued: "1" }, "got `\"1\"`"],
    ["maxQueued", { maxQueued: null }, "got `null`"],
    ["turnTimeoutMs", { turnTimeoutMs: 0 }, "Expected `turnTimeoutMs` to be a finite number greater than 0, got `0`"],
    ["turnTimeoutMs", { turnTimeoutMs: -5 }, "got `-5`"],
    ["turnTimeoutMs", { turnTimeoutMs: Number.POSITIVE_INFINITY }, "got `Infinity`"],
    ["turnTimeoutMs", { turnTimeoutMs: Number.NaN }, "got `NaN`"],
    ["turnTimeoutMs", { turnTimeoutMs: "10" }, "got `\"10\"`"],
    ["turnTimeoutMs", { turnTimeoutMs: null }, "got `null`"],
    ["activate", { activate: undefined }, "Expected `activate` to be a function, got `undefined`"],
    ["activate", { activate: "run" }, "got `\"run\"`"],
    ["onExit", { onExit: 42 }, "Expected `onExit` to be a function when given, got `42`"],
    ["onExit", { onExit: null }, "got `null`"]
  ]
  for (const [field, patch, message] of cases) {
    it.effect(`LanesConfigInvalid names \`${field}\` for ${JSON.stringify(patch)} (${message})`, () =>
      Effect.gen(function*() {
        const error = yield* invalid({ maxConcurrent: 1, activate, ...patch })
        expect(error).toBeInstanceOf(LanesConfigInvalid)
        expect(error._tag).toBe("LanesConfigInvalid")
        expect(error.field).toBe(field)
        expect(error.message).toContain(message)
      }))
  }

  it.effect("the bounds themselves are valid: maxConcurrent 1, maxQueued 0 and MAX_QUEUED, a tiny turnTimeoutMs", () =>
    Effect.gen(function*() {
      for (
        const options of [
          { maxConcurrent: 1, activate },
          { maxConcurrent: 1, maxQueued: 0, activate },
          { maxConcurrent: 1_000_000, maxQueued: MAX_QUEUED, turnTimeoutMs: 0.5, activate, onExit: () => {} }
        ]
      ) {
        const lanes = yield* createLanes(options)
        expect(yield* lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
      }
    }))

  it.effect("options that are not an object are refused, not thrown", () =>
    Effect.gen(function*() {
      expect((yield* invalid(null)).field).toBe("options")
      expect((yield* invalid(undefined)).field).toBe("options")
    }))
})

describe("Lanes: keys of any type a Map can hold (SameValueZero)", () => {
  it.effect("objects, NaN, -0 and 0, symbols, null and undefined are keys compared with SameValueZero", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const seen: Array<unknown> = []
      const lanes = yield* createLanes<unknown>({
        maxConcurrent: 100,
        activate: (key) => Effect.andThen(Effect.sync(() => seen.push(key)), Deferred.await(gate))
      })
      const obj = { id: 1 }
      const sym = Symbol("k")
      const nullProto = Object.create(null) as object
      expect(yield* lanes.wake(obj)).toBe("started")
      expect(yield* lanes.wake({ id: 1 })).toBe("started") // another object: another key
      expect(yield* lanes.wake(Number.NaN)).toBe("started")
      expect(yield* lanes.wake(Number.NaN)).toBe("queued") // NaN is NaN
      expect(yield* lanes.wake(0)).toBe("started")
      expect(yield* lanes.wake(-0)).toBe("queued") // -0 is 0
      expect(yield* lanes.wake(sym)).toBe("started")
      expect(yield* lanes.wake(Symbol("k"))).toBe("started")
      expect(yield* lanes.wake(null)).toBe("started")
      expect(yield* lanes.wake(undefined)).toBe("started")
      expect(yield* lanes.wake(nullProto)).toBe("started")
      expect(yield* lanes.wake(obj)).toBe("queued")
      expect(yield* lanes.stats).toEqual({ running: 9, waiting: 3, keys: 9 })
      yield* Deferred.succeed(gate, undefined)
      yield* idle(lanes)
      expect(seen).toHaveLength(12)
    }))

  it.effect("a LaneQueueFull for an odd key carries that key", () =>
    Effect.gen(function*() {
      const lanes = yield* createLanes<unknown>({ maxConcurrent: 1, maxQueued: 0, activate: () => Effect.never })
      yield* lanes.wake("busy")
      const key = Object.create(null) as object
      const error = yield* Effect.flip(lanes.wake(key))
      expect(error._tag).toBe("LaneQueueFull")
      if (error._tag === "LaneQueueFull") expect(error.key).toBe(key)
    }))
})

describe("Lanes: bad input never crashes the scheduler", () => {
  it.effect("an activate that throws instead of returning an Effect is reported as ActivationFailed with a defect", () =>
    Effect.gen(function*() {
      const { exits, lanes } = yield* lanesRecordingExits({
        maxConcurrent: 1,
        activate: (key) => {
          if (key === "bad") throw new Error("activate threw")
          return Effect.void
        }
      })
      yield* lanes.wake("bad")
      yield* lanes.wake("good")
      yield* idle(lanes)
      expect(exits.map((e) => `${e.key}:${e._tag}`)).toEqual(["bad:ActivationFailed", "good:ActivationSucceeded"])
      const bad = exits[0]!
      if (bad._tag === "ActivationFailed") expect(Cause.hasDies(bad.cause)).toBe(true)
    }))

  it.effect("an activate that returns something other than an Effect is reported as ActivationFailed with a defect", () =>
    Effect.gen(function*() {
      const { exits, lanes } = yield* lanesRecordingExits({
        maxConcurrent: 1,
        activate: (() => Promise.resolve(1)) as never
      })
      yield* lanes.wake("a")
      yield* idle(lanes)
      expect(Cause.hasDies(soleFailureCause(exits))).toBe(true)
      expect(yield* lanes.wake("a")).toBe("started")
    }))

  it.effect("an onExit that throws for every exit leaves the lanes working and idle keys holding no state", () =>
    Effect.gen(function*() {
      let calls = 0
      const lanes = yield* createLanes<number>({
        maxConcurrent: 2,
        activate: () => Effect.void,
        onExit: () => {
          calls++
          throw new Error("always")
        }
      })
      for (let i = 0; i < 50; i++) yield* lanes.wake(i)
      yield* idle(lanes)
      expect(calls).toBe(50)
    }))
})

describe("Lanes: an idle key holds no state", () => {
  it.effect("100_000 distinct keys come and go and stats.keys ends at 0", () =>
    Effect.gen(function*() {
      let ran = 0
      const lanes = yield* createLanes<string>({
        maxConcurrent: 64,
        activate: () => Effect.sync(() => ran++)
      })
      let max = 0
      for (let i = 0; i < 100_000; i++) {
        yield* lanes.wake(`room:${i}`)
        if (i % 1_000 === 0) {
          const s = yield* lanes.stats
          if (s.keys > max) max = s.keys
        }
      }
      expect(yield* idle(lanes)).toEqual({ running: 0, waiting: 0, keys: 0 })
      expect(ran).toBe(100_000)
      expect(max).toBeGreaterThan(64) // keys did pile up, and went away again
    }))
})
