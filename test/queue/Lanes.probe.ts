/**
 * A probe for the Lanes tests: it records what the lanes do as events, makes activations wait on
 * a gate per key until the test opens it, and lets a test wait for a condition over the events
 * (re-checked at every event: no polling, no sleeps).
 */
import { expect } from "@effect/vitest"
import type { Cause, Scope } from "effect"
import { Deferred, Effect } from "effect"
import { type ActivationExit, createLanes, type LanesOptions } from "../../src/queue/index.js"

export type Behaviour = "gate" | "succeed" | "fail" | "die" | "throw"

/** Records what the lanes do; activations wait on a gate per key until `release` opens it. */
export const makeProbe = <K = string>() => {
  const events: Array<string> = []
  const exits: Array<ActivationExit<K, string>> = []
  const gates = new Map<K, Deferred.Deferred<string>>()
  const behaviours = new Map<K, Behaviour>()
  /** When set for a key, that key's finalizer records `closing:<key>` and waits for this gate. */
  const finalGates = new Map<K, Deferred.Deferred<void>>()
  const waiters: Array<{ pred: () => boolean; done: Deferred.Deferred<void> }> = []
  let onExitHook: ((exit: ActivationExit<K, string>) => Effect.Effect<void>) | undefined

  const push = (event: string) => {
    events.push(event)
    // A waiter resumes synchronously and may push events or add waiters: unlink before resuming.
    for (let i = 0; i < waiters.length;) {
      const w = waiters[i]!
      if (w.pred()) {
        waiters.splice(i, 1)
        Deferred.doneUnsafe(w.done, Effect.void)
        i = 0
      } else {
        i++
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
  /** Position of the `n`th occurrence of `event` (-1 when absent). */
  const at = (event: string, n = 1) => {
    let seen = 0
    for (let i = 0; i < events.length; i++) if (events[i] === event && ++seen === n) return i
    return -1
  }
  const name = (k: K) => String(k)

  const activate = (key: K): Effect.Effect<string, string, Scope.Scope> =>
    Effect.gen(function*() {
      yield* Effect.addFinalizer(() =>
        Effect.suspend(() => {
          const gate = finalGates.get(key)
          if (gate === undefined) return Effect.sync(() => push(`final:${name(key)}`))
          push(`closing:${name(key)}`)
          return Effect.andThen(Deferred.await(gate), Effect.sync(() => push(`final:${name(key)}`)))
        })
      )
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
    finalGates,
    until,
    count,
    at,
    push,
    activate,
    onExit,
    release,
    setOnExitHook: (hook: (exit: ActivationExit<K, string>) => Effect.Effect<void>) => {
      onExitHook = hook
    },
    started: (key: K, n = 1) => until(() => count(`start:${name(key)}`) >= n),
    exited: (key: K, n = 1) => until(() => events.filter((e) => e.startsWith(`exit:${name(key)}:`)).length >= n)
  }
}

/**
 * Waits until the lanes hold no state: a condition re-checked once per scheduler turn (the lanes
 * move on from the fibers they forked), bounded so that a bug fails the test instead of hanging it.
 */
export const idle = (
  lanes: {
    readonly stats: Effect.Effect<{ readonly running: number; readonly waiting: number; readonly keys: number }>
  }
) =>
  Effect.gen(function*() {
    for (let turn = 0; turn < 10_000; turn++) {
      const s = yield* lanes.stats
      if (s.running === 0 && s.waiting === 0 && s.keys === 0) return s
      yield* Effect.yieldNow
    }
    return yield* Effect.die(`lanes did not become idle: ${JSON.stringify(yield* lanes.stats)}`)
  })

export const lanesWith = <K = string>(
  options: Omit<LanesOptions<K, string>, "activate" | "onExit"> = { maxConcurrent: 1 }
) =>
  Effect.gen(function*() {
    const probe = makeProbe<K>()
    const lanes = yield* createLanes<K, string>({ ...options, activate: probe.activate, onExit: probe.onExit })
    return { probe, lanes }
  })

/** Lanes whose `onExit` records every exit in `exits`, in order (for activations the probe does not make). */
export const lanesRecordingExits = (options: Omit<LanesOptions<string>, "onExit">) =>
  Effect.gen(function*() {
    const exits: Array<ActivationExit<string, never>> = []
    const lanes = yield* createLanes<string>({
      ...options,
      onExit: (exit) => {
        exits.push(exit)
      }
    })
    return { lanes, exits }
  })

/** The cause of the one exit in `exits`, which must be `ActivationFailed` (else the test fails here). */
export const soleFailureCause = <K, E>(exits: ReadonlyArray<ActivationExit<K, E>>): Cause.Cause<E> => {
  expect(exits).toHaveLength(1)
  const exit = exits[0]!
  if (exit._tag !== "ActivationFailed") throw new Error(`expected ActivationFailed, got ${exit._tag}`)
  return exit.cause
}
