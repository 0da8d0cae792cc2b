/**
 * The command-queue property test, extended with the run-time controls: random sequences of
 * dispatches (with priorities), cancels of waiting tasks (a waiting key's next task changes),
 * completions, clock ticks, setLimits, pause/resume,
 * setGroupLimits, removeLane/addLane, over three lanes of which two share a capacity group. At
 * every start it checks: one task per key at a time, the lane's and the group's caps, a paused
 * lane starts nothing, and (in a lane that uses priorities) no waiting key's next task ranks
 * above the one that started, so nothing waits past its aging bound. At the end every future
 * has settled.
 */
import { Deferred, Effect, Exit, Layer } from "effect"
import { TestClock } from "effect/testing"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { CommandQueue } from "../../src/queue/index.js"
import type { Future, TaskReport } from "../../src/queue/index.js"
import { flushFibers } from "./CommandQueue.helpers.js"

const LANES = ["a", "b", "c"] as const
const GROUPED = new Set(["a", "b"])
const AGING_MS = 300

type Op =
  | { readonly t: "dispatch"; readonly lane: number; readonly key: number; readonly priority: number }
  | { readonly t: "complete"; readonly pick: number }
  | { readonly t: "cancel"; readonly pick: number }
  | { readonly t: "tick" }
  | { readonly t: "limits"; readonly lane: number; readonly concurrent: number }
  | { readonly t: "pause"; readonly lane: number }
  | { readonly t: "resume"; readonly lane: number }
  | { readonly t: "group"; readonly concurrent: number }
  | { readonly t: "remove" }
  | { readonly t: "add" }

const lane = fc.integer({ min: 0, max: 2 })

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      t: fc.constant("dispatch" as const),
      lane,
      key: fc.integer({ min: 0, max: 3 }),
      priority: fc.oneof(fc.constant(0), fc.integer({ min: -2, max: 3 }))
    })
  },
  { weight: 6, arbitrary: fc.record({ t: fc.constant("complete" as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("cancel" as const), pick: fc.nat() }) },
  { weight: 3, arbitrary: fc.constant({ t: "tick" as const }) },
  {
    weight: 2,
    arbitrary: fc.record({ t: fc.constant("limits" as const), lane, concurrent: fc.integer({ min: 1, max: 3 }) })
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("pause" as const), lane }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("resume" as const), lane }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("group" as const), concurrent: fc.integer({ min: 1, max: 3 }) }) },
  { weight: 1, arbitrary: fc.constant({ t: "remove" as const }) },
  { weight: 1, arbitrary: fc.constant({ t: "add" as const }) }
)

interface Tracked {
  readonly id: number
  readonly lane: string
  readonly key: string
  readonly priority: number
  readonly admittedAt: number
  readonly gate: Deferred.Deferred<void>
  future?: Future<number, never>
}

const run = (ops: ReadonlyArray<Op>) =>
  Effect.gen(function*() {
    const violations: Array<string> = []
    const waiting = new Map<string, Array<Tracked>>() // lane/key -> FIFO of admitted, not started
    const running = new Map<string, Tracked>() // lane/key -> running
    const byRunId = new Map<string, Tracked>()
    const all: Array<Tracked> = []
    const concurrent: Record<string, number> = { a: 2, b: 2, c: 2 }
    const paused = new Set<string>()
    const prioritized = new Set<string>()
    let group = 2
    let cPresent = true

    const onTaskExit = (report: TaskReport) => {
      const t = byRunId.get(report.runId)
      if (t === undefined) return
      const k = `${t.lane}/${t.key}`
      if (running.get(k) === t) running.delete(k)
      const list = waiting.get(k)
      const i = list?.indexOf(t) ?? -1
      if (i >= 0) list!.splice(i, 1)
    }
    const queue = yield* CommandQueue.make({
      lanes: {
        a: { concurrent: 2, queued: 6, agingMs: AGING_MS },
        b: { concurrent: 2, queued: 6, agingMs: AGING_MS },
        c: { concurrent: 2, queued: 6, agingMs: AGING_MS }
      },
      groups: { g: { concurrent: 2, lanes: ["a", "b"] } },
      onTaskExit
    })
    let time = 0 // the TestClock's time, moved only by `tick`
    const rank = (t: Tracked) => t.priority + Math.floor((time - t.admittedAt) / AGING_MS)

    /** Checks the rules at the moment `t`'s body starts. */
    const started = (t: Tracked) => {
      const k = `${t.lane}/${t.key}`
      const list = waiting.get(k)!
      if (list[0] !== t) violations.push(`${t.id} started out of its key's order`)
      list.shift()
      if (running.has(k)) violations.push(`${t.id}: two tasks of ${k} at once`)
      if (paused.has(t.lane)) violations.push(`${t.id} started in paused lane ${t.lane}`)
      let inLane = 0
      let inGroup = 0
      for (const r of running.values()) {
        if (r.lane === t.lane) inLane++
        if (GROUPED.has(r.lane)) inGroup++
      }
      if (inLane + 1 > concurrent[t.lane]!) violations.push(`${t.id}: lane ${t.lane} over ${concurrent[t.lane]}`)
      if (GROUPED.has(t.lane) && inGroup + 1 > group) violations.push(`${t.id}: group over ${group}`)
      if (prioritized.has(t.lane)) {
        for (const [wk, wl] of waiting) {
          const head = wl[0]
          if (head === undefined || head.lane !== t.lane || running.has(wk) || wk === k) continue
          if (rank(head) > rank(t)) {
            violations.push(`${t.id} (rank ${rank(t)}) started before ${head.id} (${rank(head)})`)
          }
        }
      }
      running.set(k, t)
    }

    let next = 0
    for (const o of ops) {
      switch (o.t) {
        case "dispatch": {
          const name = LANES[o.lane]!
          if (name === "c" && !cPresent) break
          const t: Tracked = {
            id: next++,
            lane: name,
            key: `k${o.key}`,
            priority: o.priority,
            admittedAt: time,
            gate: Deferred.makeUnsafe<void>()
          }
          const k = `${t.lane}/${t.key}`
          const body = Effect.suspend(() => {
            started(t)
            return Effect.as(Deferred.await(t.gate), t.id)
          })
          // registered before the dispatch: a task may start inside it
          const list = waiting.get(k) ?? []
          list.push(t)
          waiting.set(k, list)
          const admitted = yield* Effect.exit(queue.dispatch(name, t.key, body, { priority: o.priority }))
          if (Exit.isFailure(admitted)) {
            list.splice(list.indexOf(t), 1)
            break
          }
          if (o.priority !== 0) prioritized.add(name)
          t.future = admitted.value
          byRunId.set(admitted.value.runId, t)
          all.push(t)
          break
        }
        case "complete": {
          const live = [...running.values()]
          if (live.length > 0) yield* Deferred.succeed(live[o.pick % live.length]!.gate, undefined)
          break
        }
        case "cancel": {
          const queued = [...waiting.values()].flat().filter((t) => t.future !== undefined)
          if (queued.length === 0) break
          const t = queued[o.pick % queued.length]!
          // out of the model first: it will never start, and its report comes later
          const list = waiting.get(`${t.lane}/${t.key}`)!
          list.splice(list.indexOf(t), 1)
          yield* t.future!.cancel
          break
        }
        case "tick":
          time += 100
          yield* TestClock.adjust(100)
          break
        case "limits":
          if (LANES[o.lane] === "c" && !cPresent) break
          concurrent[LANES[o.lane]!] = o.concurrent
          yield* queue.setLimits(LANES[o.lane]!, { concurrent: o.concurrent })
          break
        case "pause":
          if (LANES[o.lane] === "c" && !cPresent) break
          paused.add(LANES[o.lane]!)
          yield* queue.pause(LANES[o.lane]!)
          break
        case "resume":
          if (LANES[o.lane] === "c" && !cPresent) break
          paused.delete(LANES[o.lane]!)
          yield* queue.resume(LANES[o.lane]!)
          break
        case "group":
          group = o.concurrent
          yield* queue.setGroupLimits("g", { concurrent: o.concurrent })
          break
        case "remove":
          if (!cPresent) break
          cPresent = false
          yield* queue.removeLane("c", { timeoutMs: 0 })
          break
        case "add":
          if (cPresent) break
          cPresent = true
          concurrent.c = 2
          paused.delete("c")
          prioritized.delete("c")
          yield* queue.addLane("c", { concurrent: 2, queued: 6, agingMs: AGING_MS })
          break
      }
      yield* flushFibers
    }
    yield* queue.drain({ timeoutMs: 0 })
    const pending = []
    for (const t of all) if ((yield* t.future!.poll)._tag === "None") pending.push(t.id)
    if (pending.length > 0) violations.push(`futures never settled: ${pending.join(", ")}`)
    return violations
  }).pipe(Effect.scoped, Effect.provide(Layer.fresh(TestClock.layer())))

describe("CommandQueue model with run-time controls", () => {
  it(
    "random add/remove/resize/pause/groups/priorities: one task per key, lane and group caps, a paused lane starts nothing, nothing starves past its aging bound, every future settles",
    async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(op, { minLength: 10, maxLength: 60 }), async (ops) => {
          const violations = await Effect.runPromise(run(ops))
          expect(violations).toEqual([])
        }),
        { numRuns: 150 }
      )
    },
    120_000
  )
})
