/**
 * DeliveryQueue against a simple model, for random plans: entries spread over a few recipients, each
 * with a script of attempt outcomes (ok, transient failure, permanent failure, defect), random
 * concurrency / maxAttempts / backoff / jitter, and acks or attempt records failing in the log.
 * Time is the TestClock; every run ends when the model says nothing is left.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, References } from "effect"
import { TestClock } from "effect/testing"
import fc from "fast-check"
import { DeliveryFailure } from "../../src/delivery/errors.js"
import { DeliveryQueue } from "../../src/delivery/index.js"
import { AppendOrder } from "../../src/delivery/recipients.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"
import { makeMemoryLog } from "./memoryLog.js"

type Outcome = "ok" | "fail" | "permanent" | "die"

interface Plan {
  readonly concurrency: number
  readonly maxAttempts: number
  readonly backoffMs: ReadonlyArray<number>
  readonly jitter: number
  readonly ackFaults: number
  readonly attemptFaults: number
  readonly entries: ReadonlyArray<{ readonly to: number; readonly script: ReadonlyArray<Outcome> }>
}

const planArb: fc.Arbitrary<Plan> = fc.record({
  concurrency: fc.integer({ min: 1, max: 3 }),
  maxAttempts: fc.integer({ min: 1, max: 4 }),
  backoffMs: fc.array(fc.integer({ min: 0, max: 500 }), { minLength: 1, maxLength: 3 }),
  jitter: fc.double({ min: 0, max: 0.5, noNaN: true }),
  ackFaults: fc.integer({ min: 0, max: 3 }),
  attemptFaults: fc.integer({ min: 0, max: 2 }),
  entries: fc.array(
    fc.record({
      to: fc.integer({ min: 0, max: 3 }),
      script: fc.array(fc.constantFrom<Outcome>("ok", "fail", "fail", "permanent", "die"), { maxLength: 4 })
    }),
    { minLength: 1, maxLength: 24 }
  )
})

/** What the model expects for one entry: how many attempts, and whether it ends acked or dead. */
const expected = (
  script: ReadonlyArray<Outcome>,
  maxAttempts: number
): { readonly attempts: number; readonly acked: boolean } => {
  for (let k = 1;; k++) {
    const outcome = script[k - 1] ?? "ok"
    if (outcome === "ok") return { attempts: k, acked: true }
    if (outcome === "permanent" || k >= maxAttempts) return { attempts: k, acked: false }
  }
}

const run = (plan: Plan) =>
  Effect.gen(function*() {
    const log = makeMemoryLog()
    const attempts: Array<DeliveryEntry> = []
    const scripts = new Map<string, ReadonlyArray<Outcome>>()
    const counts = new Map<string, number>()
    const deliver = (entry: DeliveryEntry) =>
      Effect.suspend(() => {
        attempts.push(entry)
        const n = (counts.get(entry.id) ?? 0) + 1
        counts.set(entry.id, n)
        const outcome = scripts.get(entry.id)?.[n - 1] ?? "ok"
        switch (outcome) {
          case "ok":
            return Effect.void
          case "fail":
            return Effect.fail(new DeliveryFailure({ message: "transient" }))
          case "permanent":
            return Effect.fail(new DeliveryFailure({ message: "permanent", permanent: true }))
          case "die":
            return Effect.die(new Error("defect"))
        }
      })
    const q = yield* DeliveryQueue.make({ log, deliver, ...plan })
    log.failNext("ack", plan.ackFaults)
    const entries: Array<DeliveryEntry> = []
    for (const [i, e] of plan.entries.entries()) {
      const entry = yield* q.enqueue({ channel: "p", to: `r${e.to}`, body: i })
      scripts.set(entry.id, e.script)
      entries.push(entry)
      if (i === 0) log.failNext("attempt", plan.attemptFaults)
    }
    for (let round = 0; round < 400 && ((yield* q.stats).pending > 0); round++) {
      yield* q.idle
      yield* TestClock.adjust(1_000)
    }
    yield* q.idle

    // Every entry ends as the model says, with exactly the attempts it says (a failing ack never causes a re-delivery).
    const dead = new Set((yield* log.dead).map((e) => e.id))
    let ackedCount = 0
    for (const [i, entry] of entries.entries()) {
      const want = expected(plan.entries[i].script, plan.maxAttempts)
      assert.strictEqual(counts.get(entry.id), want.attempts, `attempts of entry ${i}`)
      assert.strictEqual(log.acked.includes(entry.id), want.acked, `entry ${i} acked`)
      assert.strictEqual(dead.has(entry.id), !want.acked, `entry ${i} dead`)
      if (want.acked) ackedCount++
    }
    assert.deepStrictEqual(yield* q.stats, {
      pending: 0,
      dead: entries.length - ackedCount,
      inFlight: 0,
      delivered: ackedCount
    })
    // Order per recipient: every attempt of an entry comes before any attempt of a later entry of that recipient.
    const last = new Map<string, number>()
    for (const a of attempts) {
      const prev = last.get(a.message.to)
      assert.isTrue(prev === undefined || prev <= a.seq, `${a.message.to}: seq ${a.seq} attempted after seq ${prev}`)
      last.set(a.message.to, a.seq)
    }
  })

describe("DeliveryQueue: model-based property", () => {
  it("random failure scripts and log faults end as the model says, in order per recipient", async () => {
    await fc.assert(
      fc.asyncProperty(planArb, (plan) =>
        Effect.runPromise(
          Effect.scoped(run(plan)).pipe(
            Effect.provide(TestClock.layer()),
            Effect.provideService(References.MinimumLogLevel, "None") // the warnings are checked elsewhere
          )
        )),
      { numRuns: 200 }
    )
  }, 60_000)
})

describe("AppendOrder: property", () => {
  it("releases every appended entry once, in increasing seq, however starts, seq assignment and completions interleave", () => {
    // Each step starts an append, gives a random started one its seq, or completes (or fails) a random one that has its seq.
    const step = fc.record({ op: fc.constantFrom("start", "assign", "complete", "fail"), pick: fc.nat() })
    fc.assert(
      fc.property(fc.array(step, { maxLength: 200 }), (steps) => {
        const order = new AppendOrder()
        let seq = 0
        const started: Array<number> = [] // tickets without a seq yet
        const assigned: Array<{ readonly ticket: number; readonly seq: number }> = []
        const released: Array<number> = []
        const appended = new Set<number>()
        const settle = (ticket: number, entrySeq: number | undefined) => {
          const entry = entrySeq === undefined ? undefined : ({ id: `e${entrySeq}`, seq: entrySeq } as DeliveryEntry)
          for (const e of order.settle(ticket, entry)) released.push(e.seq)
        }
        const run = (op: string, pick: number) => {
          if (op === "start") started.push(order.take())
          else if (op === "assign" && started.length > 0) {
            const [ticket] = started.splice(pick % started.length, 1)
            assigned.push({ ticket, seq: ++seq })
            appended.add(seq)
          } else if ((op === "complete" || op === "fail") && assigned.length > 0) {
            const [a] = assigned.splice(pick % assigned.length, 1)
            if (op === "fail") appended.delete(a.seq) // the call failed after taking a seq: nothing to admit
            settle(a.ticket, op === "fail" ? undefined : a.seq)
          }
        }
        for (const { op, pick } of steps) run(op, pick)
        // Drain: assign and complete whatever is left.
        while (started.length > 0) run("assign", 0)
        while (assigned.length > 0) run("complete", 0)
        for (let i = 1; i < released.length; i++) assert.isAbove(released[i], released[i - 1])
        assert.deepStrictEqual([...released].sort((a, b) => a - b), [...appended].sort((a, b) => a - b))
      }),
      { numRuns: 500 }
    )
  })
})
