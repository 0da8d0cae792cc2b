/**
 * Model-based property test of `queuedAhead` (`src/queue/engine/ahead.ts`, `onWait`'s
 * `WaitInfo.queuedAhead`): random dispatches (several tasks per key, with and without
 * priorities), completions, cancels of a task and of a key, clock ticks across `agingMs`,
 * setLimits and pause/resume on a real queue; after every step, for every waiting task of the
 * lane, `queuedAhead` must equal the model: the scan it replaced, kept here as it was (every key's
 * next task in turn order, each turn to the first of the highest rank, O(tasks × keys)).
 * `AHEAD_PROPERTY_RUNS=2000 npx vitest run test/queue/ahead.property` for a longer run.
 */
import { Deferred, Effect, Exit, Layer } from "effect"
import { TestClock } from "effect/testing"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { queuedAhead } from "../../src/queue/engine/ahead.js"
import { engineOf } from "../../src/queue/engine/Engine.js"
import type { KeyTasks, LaneState, Task } from "../../src/queue/engine/state.js"
import { WAITING } from "../../src/queue/engine/state.js"
import { CommandQueue } from "../../src/queue/index.js"
import type { Future } from "../../src/queue/index.js"
import { flushFibers } from "./CommandQueue.helpers.js"

const AGING_MS = 100
const RUNS = Number(process.env.AHEAD_PROPERTY_RUNS ?? 150)

/** The model: the O(tasks × keys) scan `queuedAhead` was before (watch.ts at 2bd9f89). */
const modelAhead = (task: Task): number => {
  const lane = task.laneState
  const turns: Array<Task> = []
  const seen = new Set<string>()
  const take = (key: string): void => {
    if (seen.has(key)) return
    seen.add(key)
    const ks = lane.keys.get(key)
    if (ks?.head !== undefined) turns.push(ks.head)
  }
  for (let e = lane.lanes.queuedHead(); e !== undefined; e = e.next) take(e.key)
  for (const key of lane.keys.keys()) take(key)
  const now = lane.engine.now()
  const rankAt = (t: Task) => (t.options?.priority ?? 0) + Math.floor((now - t.admittedAt) / lane.limits.agingMs)
  let ahead = 0
  for (let i = 0; i < turns.length; i++) {
    let best = i
    if (lane.prioritized) {
      let bestRank = rankAt(turns[i]!)
      for (let j = i + 1; j < turns.length; j++) {
        const r = rankAt(turns[j]!)
        if (r > bestRank) {
          best = j
          bestRank = r
        }
      }
    }
    const t = turns[best]!
    if (t === task) return ahead
    ahead++
    turns.splice(best, 1)
    turns.splice(i, 0, t)
    if (t.next !== undefined) turns.push(t.next)
  }
  return ahead
}

type Op =
  | { readonly t: "dispatch"; readonly key: number; readonly priority: number }
  | { readonly t: "complete"; readonly pick: number }
  | { readonly t: "cancel"; readonly pick: number }
  | { readonly t: "cancelKey"; readonly key: number }
  | { readonly t: "tick"; readonly ms: number }
  | { readonly t: "limits"; readonly concurrent: number }
  | { readonly t: "pause" }
  | { readonly t: "resume" }

const ops = (priorities: boolean): fc.Arbitrary<Array<Op>> => {
  const priority = priorities ? fc.oneof(fc.constant(0), fc.integer({ min: -2, max: 3 })) : fc.constant(0)
  const op: fc.Arbitrary<Op> = fc.oneof(
    {
      weight: 10,
      arbitrary: fc.record({ t: fc.constant("dispatch" as const), key: fc.integer({ min: 0, max: 6 }), priority })
    },
    { weight: 3, arbitrary: fc.record({ t: fc.constant("complete" as const), pick: fc.nat() }) },
    { weight: 2, arbitrary: fc.record({ t: fc.constant("cancel" as const), pick: fc.nat() }) },
    { weight: 1, arbitrary: fc.record({ t: fc.constant("cancelKey" as const), key: fc.integer({ min: 0, max: 6 }) }) },
    {
      weight: 3,
      arbitrary: fc.record({ t: fc.constant("tick" as const), ms: fc.constantFrom(1, 50, 99, 100, 250) })
    },
    {
      weight: 1,
      arbitrary: fc.record({ t: fc.constant("limits" as const), concurrent: fc.integer({ min: 1, max: 3 }) })
    },
    { weight: 1, arbitrary: fc.constant({ t: "pause" as const }) },
    { weight: 1, arbitrary: fc.constant({ t: "resume" as const }) }
  )
  return fc.array(op, { minLength: 5, maxLength: 50 })
}

/** Every waiting task of the lane, each compared with the model. */
const compare = (lane: LaneState, step: number, problems: Array<string>): number => {
  let checked = 0
  for (const ks of lane.keys.values() as Iterable<KeyTasks>) {
    for (let t = ks.head; t !== undefined; t = t.next) {
      if (t.state !== WAITING) continue
      checked++
      const got = queuedAhead(t)
      const want = modelAhead(t)
      if (got !== want) problems.push(`step ${step}: ${t.runId} of ${t.key}: queuedAhead ${got}, model ${want}`)
    }
  }
  return checked
}

const run = (list: ReadonlyArray<Op>) =>
  Effect.gen(function*() {
    const problems: Array<string> = []
    let checked = 0
    let step = 0
    let lane: LaneState | undefined
    // also in the middle of transitions: when a task's finalizer runs and when it is reported
    const midway = () =>
      Effect.sync(() => {
        if (lane !== undefined) checked += compare(lane, step, problems)
      })
    const queue = yield* CommandQueue.make({
      lanes: { main: { concurrent: 2, queued: 40, agingMs: AGING_MS } },
      onTaskExit: midway
    })
    lane = engineOf(queue).byName.get("main")!
    const gates = new Map<string, Deferred.Deferred<void>>() // runId -> its gate, while it runs
    const futures: Array<Future<void, never>> = []
    for (const o of list) {
      switch (o.t) {
        case "dispatch": {
          const gate = Deferred.makeUnsafe<void>()
          const body = Effect.suspend(() => Deferred.await(gate))
          const admitted = yield* Effect.exit(
            queue.dispatch("main", `k${o.key}`, body, { priority: o.priority, finalizer: midway })
          )
          if (Exit.isSuccess(admitted)) {
            futures.push(admitted.value)
            gates.set(admitted.value.runId, gate)
          }
          break
        }
        case "complete": {
          const running = [...(lane.keys.values() as Iterable<KeyTasks>)].flatMap((ks) =>
            ks.running === undefined ? [] : [ks.running]
          )
          if (running.length > 0) {
            yield* Deferred.succeed(gates.get(running[o.pick % running.length]!.runId)!, undefined)
          }
          break
        }
        case "cancel": {
          const open = futures.filter((f) => gates.has(f.runId))
          if (open.length > 0) {
            const f = open[o.pick % open.length]!
            gates.delete(f.runId)
            yield* f.cancel
          }
          break
        }
        case "cancelKey":
          yield* queue.cancel("main", `k${o.key}`)
          break
        case "tick":
          yield* TestClock.adjust(o.ms)
          break
        case "limits":
          yield* queue.setLimits("main", { concurrent: o.concurrent })
          break
        case "pause":
          yield* queue.pause("main")
          break
        case "resume":
          yield* queue.resume("main")
          break
      }
      // before the fibers run (keys just woken, activations owed) and after
      checked += compare(lane, step, problems)
      yield* flushFibers
      checked += compare(lane, step, problems)
      step++
    }
    yield* queue.drain({ timeoutMs: 0 })
    return { problems, checked }
  }).pipe(Effect.scoped, Effect.provide(Layer.fresh(TestClock.layer())))

describe("queuedAhead against the scan it replaced", () => {
  for (const priorities of [false, true]) {
    it(
      `random dispatches, completions, cancels, ticks, limits, pause/resume ${
        priorities ? "with priorities (ranked turns)" : "without priorities (turns go round)"
      }: every waiting task's queuedAhead equals the model's`,
      async () => {
        let checked = 0
        await fc.assert(
          fc.asyncProperty(ops(priorities), async (list) => {
            const result = await Effect.runPromise(run(list))
            checked += result.checked
            expect(result.problems).toEqual([])
          }),
          { numRuns: RUNS }
        )
        // the runs did look at waiting tasks (not a property of empty lanes)
        expect(checked).toBeGreaterThan(RUNS)
      },
      120_000
    )
  }
})
