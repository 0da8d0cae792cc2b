/**
 * createLanes, rule by rule (shared/spec/lanes.md). Deterministic: activations wait on gates the
 * test opens, the test waits on conditions over recorded events, time comes from TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Context, Deferred, Effect, Exit, Layer, Logger, Scope } from "effect"
import { TestClock } from "effect/testing"
import { type ActivationExit, createLanes, LaneQueueFull, LanesClosed, type LanesOptions } from "../../src/queue/index.js"

type Behaviour = "gate" | "succeed" | "fail" | "die" | "throw"

/** Records what the lanes do; activations wait on a gate per key until `release` opens it. */
const makeProbe = <K = string>() => {
  const events: Array<string> = []
  const exits: Array<ActivationExit<K, string>> = []
  const gates = new Map<K, Deferred.Deferred<string>>()
  const behaviours = new Map<K, Behaviour>()
  const waiters: Array<{ pred: () => boolean; done: Deferred.Deferred<void> }> = []
  let onExitHook: ((exit: ActivationExit<K, string>) => Effect.Effect<void>) | undefined

  const push = (event: string) => {
    events.push(event)
    for (let i = waiters.length - 1; i >= 0; i--) {
      if (waiters[i]!.pred()) {
        Deferred.doneUnsafe(waiters[i]!.done, Effect.void)
        waiters.splice(i, 1)
      }
    }
  }
  /** Waits until `pred` holds (re-checked at every event); no polling, no sleeps. */
  const until = (pred: () => boolean): Effect.Effect<void> =>
    Effect.suspend(() => {
      if (pred()) return Effect.void
      const done = Deferred.makeUnsafe<void>()
      waiters.push({ pred, done })
      return Deferred.await(done)
    })
  const count = (event: string) => events.filter((e) => e === event).length
  const name = (k: K) => String(k)

  const activate = (key: K): Effect.Effect<string, string, Scope.Scope> =>
    Effect.gen(function*() {
      yield* Effect.addFinalizer(() => Effect.sync(() => push(`final:${name(key)}`)))
      const behaviour = behaviours.get(key) ?? "gate"
      const gate = Deferred.makeUnsafe<string>()
      if (behaviour === "gate") gates.set(key, gate)
      push(`start:${name(key)}`)
      if (behaviour === "succeed") return "ok"
      if (behaviour === "fail") return yield* Effect.fail("boom")
      if (behaviour === "die") return yield* Effect.die("defect")
      return yield* Deferred.await(gate)
    })

  const onExit = (exit: ActivationExit<K, string>): Effect.Effect<void> =>
    Effect.suspend(() => {
      exits.push(exit)
      const detail = exit._tag === "ActivationInterrupted" ? `:${exit.reason}:${exit.started}` : ""
      const hook = onExitHook ? onExitHook(exit) : Effect.void
      return Effect.andThen(hook, Effect.sync(() => push(`exit:${name(exit.key)}:${exit._tag}${detail}`)))
    })

  /** Opens the gate of the running activation of `key` (it succeeds with `value`). */
  const release = (key: K, value = "done"): Effect.Effect<void> =>
    Effect.suspend(() => {
      const gate = gates.get(key)
      if (gate === undefined) return Effect.die(`no activation of ${name(key)} waits`)
      gates.delete(key)
      return Deferred.succeed(gate, value)
    })

  return {
    events,
    exits,
    behaviours,
    until,
    count,
    activate,
    onExit,
    release,
    setOnExitHook: (hook: (exit: ActivationExit<K, string>) => Effect.Effect<void>) => {
      onExitHook = hook
    },
    started: (key: K, n = 1) => until(() => count(`start:${name(key)}`) >= n),
    exited: (key: K, n = 1) =>
      until(() => events.filter((e) => e.startsWith(`exit:${name(key)}:`)).length >= n)
  }
}

/**
 * Waits until the lanes hold no state: a condition re-checked once per scheduler turn (the lanes
 * move on from the fibers they forked), bounded so that a bug fails the test instead of hanging it.
 */
const idle = (lanes: { readonly stats: Effect.Effect<{ readonly running: number; readonly waiting: number; readonly keys: number }> }) =>
  Effect.gen(function*() {
    for (let turn = 0; turn < 10_000; turn++) {
      const s = yield* lanes.stats
      if (s.running === 0 && s.waiting === 0 && s.keys === 0) return s
      yield* Effect.yieldNow
    }
    return yield* Effect.die(`lanes did not become idle: ${JSON.stringify(yield* lanes.stats)}`)
  })

const lanesWith = <K = string>(
  options: Omit<LanesOptions<K, string>, "activate" | "onExit"> = { maxConcurrent: 1 }
) =>
  Effect.gen(function*() {
    const probe = makeProbe<K>()
    const lanes = yield* createLanes<K, string>({ ...options, activate: probe.activate, onExit: probe.onExit })
    return { probe, lanes }
  })

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
