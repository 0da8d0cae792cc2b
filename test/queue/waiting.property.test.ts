/**
 * Model-based property test of the lanes' waiting keys (`src/queue/lanes/waiting.ts` and the
 * priority index under it): random pushes, removals, re-rankings (a key's next task changes:
 * another priority, another admission time, or nothing left to start), clock ticks, `agingMs`
 * changes, `prioritize()` at a random point and takes, against a model that keeps the keys in an
 * array in FIFO order and picks by scanning it: the highest `priority + floor((now - since) /
 * agingMs)`, the first in the FIFO on ties (FIFO order before `prioritize()`). Every take must
 * pick the model's key, and `keys()` must be the model's FIFO after every step.
 * 1,000 runs by default; `WAITING_PROPERTY_RUNS=20000 npx vitest run test/queue/waiting.property`.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { Entry } from "../../src/queue/lanes/entry.js"
import type { Ranking } from "../../src/queue/lanes/entry.js"
import { WaitingKeys } from "../../src/queue/lanes/waiting.js"

const KEYS = 24
// Infinity: a key with nothing left to start ranks first; fractions and negatives are valid priorities
const PRIORITIES = [1, -1, 2.5, 3, Number.POSITIVE_INFINITY] as const
const AGING = [1, 7, 100, 1_000] as const

type Op =
  | { readonly t: "push"; readonly key: number; readonly priority: number; readonly age: number }
  | { readonly t: "remove"; readonly pick: number }
  | { readonly t: "rerank"; readonly pick: number; readonly priority: number; readonly age: number }
  | { readonly t: "take" }
  | { readonly t: "tick"; readonly ms: number }
  | { readonly t: "aging"; readonly agingMs: number }
  | { readonly t: "prioritize" }
  | { readonly t: "clear" }

// mostly 0, so that a band holds many keys (its heap is exercised)
const priority = fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, {
  weight: 2,
  arbitrary: fc.constantFrom(...PRIORITIES)
})
// how long ago the key's next task was admitted: within a few agingMs steps, often on a boundary
const age = fc.oneof(fc.integer({ min: 0, max: 3_000 }), fc.constantFrom(0, 1, 7, 100, 1_000, 2_000))

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({ t: fc.constant("push" as const), key: fc.integer({ min: 0, max: KEYS - 1 }), priority, age })
  },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("remove" as const), pick: fc.nat() }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant("rerank" as const), pick: fc.nat(), priority, age }) },
  { weight: 6, arbitrary: fc.constant({ t: "take" as const }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("tick" as const), ms: fc.integer({ min: 0, max: 1_500 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("aging" as const), agingMs: fc.constantFrom(...AGING) }) },
  { weight: 1, arbitrary: fc.constant({ t: "prioritize" as const }) },
  { weight: 1, arbitrary: fc.constant({ t: "clear" as const }) }
)

interface Ranked {
  priority: number
  since: number
}

const run = (ops: ReadonlyArray<Op>, prioritizedFromStart: boolean): Array<string> => {
  const problems: Array<string> = []
  let now = 10_000
  let agingMs: number = AGING[2]
  let prioritized = prioritizedFromStart
  const state = new Map<Entry<number>, Ranked>()
  const ranking: Ranking<number> = {
    priority: (e) => state.get(e)!.priority,
    since: (e) => state.get(e)!.since,
    now: () => now,
    agingMs: () => agingMs
  }
  const waiting = new WaitingKeys<number>(undefined, ranking)
  if (prioritized) waiting.prioritize()
  const entries = Array.from({ length: KEYS }, (_, k) => new Entry(k))
  // the model: the waiting entries in FIFO order
  let fifo: Array<Entry<number>> = []
  const rank = (e: Entry<number>) => {
    const r = state.get(e)!
    return r.priority + Math.floor((now - r.since) / agingMs)
  }
  const modelPick = (): Entry<number> => {
    let best = fifo[0]!
    if (!prioritized) return best
    for (const e of fifo) if (rank(e) > rank(best)) best = e
    return best
  }
  for (const [i, o] of ops.entries()) {
    switch (o.t) {
      case "push": {
        const e = entries[o.key]!
        if (fifo.includes(e)) break
        state.set(e, { priority: o.priority, since: now - o.age })
        waiting.push(e)
        fifo.push(e)
        break
      }
      case "remove": {
        if (fifo.length === 0) break
        const e = fifo[o.pick % fifo.length]!
        waiting.unlink(e)
        fifo = fifo.filter((x) => x !== e)
        break
      }
      case "rerank": {
        if (fifo.length === 0) break
        const e = fifo[o.pick % fifo.length]!
        state.set(e, { priority: o.priority, since: now - o.age })
        waiting.rerank(e)
        break
      }
      case "take": {
        if (fifo.length === 0) break
        const expected = modelPick()
        const got = waiting.take()
        if (got !== expected) {
          problems.push(
            `step ${i}: took key ${got.key} (rank ${rank(got)}), the model key ${expected.key} (rank ${rank(expected)})`
          )
          return problems
        }
        fifo = fifo.filter((x) => x !== got)
        break
      }
      case "tick":
        now += o.ms
        break
      case "aging":
        agingMs = o.agingMs
        break
      case "prioritize":
        prioritized = true
        waiting.prioritize()
        break
      case "clear":
        waiting.takeAll()
        fifo = []
        break
    }
    const keys = waiting.keys()
    const expectedKeys = fifo.map((e) => e.key)
    if (keys.join() !== expectedKeys.join()) {
      problems.push(`step ${i} (${o.t}): keys ${keys.join()}, the model ${expectedKeys.join()}`)
      return problems
    }
  }
  // what is left comes out in the model's order
  while (fifo.length > 0) {
    const expected = modelPick()
    const got = waiting.take()
    if (got !== expected) {
      problems.push(`draining: took key ${got.key}, the model key ${expected.key}`)
      return problems
    }
    fifo = fifo.filter((x) => x !== got)
  }
  if (waiting.head !== undefined) problems.push("keys left after the model's were taken")
  return problems
}

const RUNS = Number(process.env.WAITING_PROPERTY_RUNS ?? 1_000)

// One band, agingMs 1: every millisecond of wait is a rank step, so each take is the oldest key and
// the band's heap decides every pick (many pushes and removals before the takes).
const heapOp: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      t: fc.constant("push" as const),
      key: fc.integer({ min: 0, max: KEYS - 1 }),
      priority: fc.constant(0),
      age: fc.integer({ min: 0, max: 50 })
    })
  },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("remove" as const), pick: fc.nat() }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant("rerank" as const),
      pick: fc.nat(),
      priority: fc.constant(0),
      age: fc.integer({ min: 0, max: 50 })
    })
  },
  { weight: 2, arbitrary: fc.constant({ t: "take" as const }) }
)

describe("lanes waiting keys against a sorted-scan model", () => {
  it("with priorities from the start: every take is the model's highest effective priority, first in the FIFO on ties", () => {
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 120 }), (ops) => {
        expect(run(ops, true)).toEqual([])
      }),
      { numRuns: RUNS }
    )
  })

  it("prioritize() at a random point: FIFO order before, the ranked order after, the keys already waiting included", () => {
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 120 }), (ops) => {
        expect(run(ops, false)).toEqual([])
      }),
      { numRuns: RUNS }
    )
  })

  it("one band, agingMs 1: every take is the key waiting longest (the band's heap under pushes, removals, re-rankings)", () => {
    fc.assert(
      fc.property(fc.array(heapOp, { minLength: 1, maxLength: 150 }), (ops) => {
        expect(run([{ t: "aging", agingMs: 1 }, ...ops], true)).toEqual([])
      }),
      { numRuns: RUNS }
    )
  })

  it("a key whose next task changed band while it waits keeps its FIFO place among its new band (ties)", () => {
    // a, b, c wait at priority 0; b moves to 1 and back to 0: on the tie it is still before c
    expect(
      run([
        { t: "push", key: 0, priority: 0, age: 0 },
        { t: "push", key: 1, priority: 0, age: 0 },
        { t: "push", key: 2, priority: 0, age: 0 },
        { t: "rerank", pick: 1, priority: 1, age: 0 },
        { t: "rerank", pick: 1, priority: 0, age: 0 },
        { t: "take" },
        { t: "take" },
        { t: "take" }
      ], true)
    ).toEqual([])
  })
})
