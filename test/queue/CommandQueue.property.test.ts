/**
 * Model-based property test of one lane: random dispatches (a few keys), completions and
 * cancels, checked after every step against a plain model of the spec's scheduling rules —
 * per-key FIFO, one task per key at a time, at most `concurrent` keys running, a freed slot to the
 * key that waited longest, a key with more tasks re-queued at the tail (fairness), the ownership
 * bound `concurrent + queued`, and no key left behind.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { AdmissionError, createCommandQueue } from "../../src/queue/index.js"

type Op =
  | { readonly t: "dispatch"; readonly key: number }
  | { readonly t: "complete"; readonly pick: number }
  | { readonly t: "cancel"; readonly pick: number }

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ t: fc.constant("dispatch" as const), key: fc.integer({ min: 0, max: 4 }) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant("complete" as const), pick: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("cancel" as const), pick: fc.nat() }) }
)

const flush = async () => {
  for (let i = 0; i < 6; i++) await new Promise((r) => setImmediate(r))
}

/** The spec's rules for one lane, with nothing but arrays and maps. */
class Model {
  readonly running = new Map<string, number>()
  readonly fifo = new Map<string, Array<number>>()
  readonly queue: Array<string> = []
  owned = 0
  constructor(readonly concurrent: number, readonly capacity: number) {}

  dispatch(key: string, id: number): boolean {
    if (this.owned >= this.capacity) return false
    this.owned++
    const list = this.fifo.get(key) ?? []
    list.push(id)
    this.fifo.set(key, list)
    if (!this.running.has(key) && !this.queue.includes(key)) {
      if (this.running.size < this.concurrent && this.queue.length === 0) this.start(key)
      else this.queue.push(key)
    }
    return true
  }
  start(key: string): void {
    const list = this.fifo.get(key)!
    this.running.set(key, list.shift()!)
    if (list.length === 0) this.fifo.delete(key)
  }
  finish(key: string): void {
    this.running.delete(key)
    this.owned--
    if (this.fifo.has(key)) this.queue.push(key)
    while (this.running.size < this.concurrent && this.queue.length > 0) this.start(this.queue.shift()!)
  }
  cancelWaiting(key: string, id: number): void {
    const list = this.fifo.get(key)!
    list.splice(list.indexOf(id), 1)
    this.owned--
    if (list.length === 0) {
      this.fifo.delete(key)
      const at = this.queue.indexOf(key)
      if (at >= 0) this.queue.splice(at, 1)
    }
  }
  waiting(): Array<readonly [string, number]> {
    return [...this.fifo].flatMap(([key, ids]) => ids.map((id) => [key, id] as const))
  }
}

describe("CommandQueue model", () => {
  it(
    "one lane follows the model: per-key FIFO, one task per key, concurrent slots, fairness, ownership bound, no key left behind",
    async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 1, max: 3 }),
          fc.integer({ min: 0, max: 4 }),
          fc.array(op, { maxLength: 40 }),
          async (concurrent, queued, ops) => {
            const q = await createCommandQueue({ lanes: { work: { concurrent, queued } } })
            const model = new Model(concurrent, concurrent + queued)
            const release = new Map<number, () => void>()
            const running = new Set<number>()
            const futures = new Map<number, { readonly cancel: () => Promise<void> }>()
            let next = 0
            try {
              for (const o of ops) {
                if (o.t === "dispatch") {
                  const id = next++
                  const key = `k${o.key}`
                  const accepted = model.dispatch(key, id)
                  try {
                    const f = q.dispatch("work", key, () =>
                      new Promise<void>((resolve) => {
                        running.add(id)
                        release.set(id, () => {
                          running.delete(id)
                          resolve()
                        })
                      }))
                    futures.set(id, f)
                    expect(accepted).toBe(true)
                  } catch (error) {
                    expect(error).toBeInstanceOf(AdmissionError)
                    expect(accepted).toBe(false)
                  }
                } else if (o.t === "complete") {
                  const modelRunning = [...model.running]
                  if (modelRunning.length === 0) continue
                  const [key, id] = modelRunning[o.pick % modelRunning.length]!
                  model.finish(key)
                  release.get(id)!()
                } else {
                  const waiting = model.waiting()
                  if (waiting.length === 0) continue
                  const [key, id] = waiting[o.pick % waiting.length]!
                  model.cancelWaiting(key, id)
                  await futures.get(id)!.cancel()
                }
                await flush()
                // the tasks that run are exactly the model's
                expect(running).toEqual(new Set(model.running.values()))
                const lane = q.snapshot().find((l) => l.lane === "work")!
                expect(lane.running).toBe(model.running.size)
                expect(lane.waiting).toBe(model.owned - model.running.size)
                expect(lane.keys).toBe(new Set([...model.running.keys(), ...model.fifo.keys()]).size)
              }
            } finally {
              await q.drain({ timeoutMs: 0 })
            }
          }
        ),
        { numRuns: 150 }
      )
    },
    60_000
  )
})
