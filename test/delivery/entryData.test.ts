/**
 * `EntryData` keeps what a pending entry holds small (payload.ts): its attempt state is an object of its
 * own only once it differs from a fresh entry's, `status` and `committed` are one small integer and
 * `enqueuedAt` two. Through the accessors every field reads back exactly what was given or last set,
 * whatever the order of writes; an entry whose attempt state went back to the defaults compares equal
 * to a fresh one (the tests compare entries structurally); a clone changes apart from its original.
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { EntryData } from "../../src/delivery/entryData.js"

const make = (
  enqueuedAt: number,
  attempts = 0,
  lastError: string | undefined = undefined,
  nextAttemptAt: number | undefined = undefined,
  status: "pending" | "dead" = "pending",
  committed = false,
  started = false
) =>
  new EntryData(
    "0b5a6a9e-3c1f-4b7e-9a51-5e2f0c8d7a10",
    7,
    enqueuedAt,
    undefined,
    "{}",
    attempts,
    lastError,
    nextAttemptAt,
    status,
    committed,
    100,
    started
  )

const fields = (e: EntryData) => ({
  enqueuedAt: e.enqueuedAt,
  attempts: e.attempts,
  lastError: e.lastError,
  nextAttemptAt: e.nextAttemptAt,
  status: e.status,
  committed: e.committed,
  started: e.started
})

const time = fc.oneof(
  fc.integer({ min: 0, max: 2 ** 45 }),
  fc.constantFrom(0, 1, 2 ** 26 - 1, 2 ** 26, 2 ** 53 - 1, 1_764_742_800_123, -1, -(2 ** 40), 0.5, 1e300, -0),
  fc.double({ noNaN: false })
)

describe("EntryData", () => {
  it("enqueuedAt reads back exactly the number given (whole ms, fractions, negatives, huge, NaN, infinities)", () => {
    fc.assert(
      fc.property(time, (t) => {
        assert.isTrue(Object.is(make(t).enqueuedAt, t), String(t))
        assert.isTrue(Object.is(make(t).clone().enqueuedAt, t), String(t))
      })
    )
    assert.isTrue(Object.is(make(-0).enqueuedAt, -0), "-0 stays -0")
  })

  it("every field reads back what was given or last set, in any order of writes; back at the defaults it equals a fresh entry", () => {
    const write = fc.oneof(
      fc.record({ f: fc.constant("attempts" as const), v: fc.constantFrom(0, 1, 5) }),
      fc.record({ f: fc.constant("lastError" as const), v: fc.constantFrom(undefined, "", "boom") }),
      fc.record({ f: fc.constant("nextAttemptAt" as const), v: fc.constantFrom(undefined, 0, 1_764_742_800_123.5) }),
      fc.record({ f: fc.constant("status" as const), v: fc.constantFrom("pending" as const, "dead" as const) }),
      fc.record({ f: fc.constant("committed" as const), v: fc.boolean() }),
      fc.record({ f: fc.constant("started" as const), v: fc.boolean() })
    )
    fc.assert(
      fc.property(fc.array(write, { maxLength: 12 }), fc.boolean(), (writes, fromTries) => {
        const e = fromTries ? make(1000, 2, "x", 5, "dead", true, true) : make(1000)
        const model: Record<string, unknown> = fields(e)
        for (const w of writes) {
          ;(e as unknown as Record<string, unknown>)[w.f] = w.v
          model[w.f] = w.v
          assert.deepStrictEqual(fields(e), model)
        }
        // The same state built at once is the same object, structurally (a canonical representation).
        const built = make(
          1000,
          model.attempts as number,
          model.lastError as string | undefined,
          model.nextAttemptAt as number | undefined,
          model.status as "pending" | "dead",
          model.committed as boolean,
          model.started as boolean
        )
        assert.deepStrictEqual(e, built)
        assert.deepStrictEqual(e.clone(), built)
      })
    )
  })

  it("a clone changes apart from its original, and the original apart from it", () => {
    const e = make(1000, 1, "first", 2000, "pending", true, false)
    const c = e.clone()
    c.attempts = 2
    c.lastError = "second"
    c.started = true
    c.status = "dead"
    assert.deepStrictEqual(fields(e), {
      enqueuedAt: 1000,
      attempts: 1,
      lastError: "first",
      nextAttemptAt: 2000,
      status: "pending",
      committed: true,
      started: false
    })
    e.attempts = 0
    e.lastError = undefined
    e.nextAttemptAt = undefined
    assert.strictEqual(c.attempts, 2)
    assert.strictEqual(c.lastError, "second")
    assert.strictEqual(c.nextAttemptAt, 2000)
    assert.deepStrictEqual(e, make(1000, 0, undefined, undefined, "pending", true))
  })

  it("toEntry carries the attempt state and maybeSent only when there is some", () => {
    const fresh = make(1000, 0, undefined, undefined, "pending", true).toEntry()
    assert.deepStrictEqual(fresh, {
      id: "0b5a6a9e-3c1f-4b7e-9a51-5e2f0c8d7a10",
      seq: 7,
      message: {} as never,
      enqueuedAt: 1000,
      attempts: 0,
      status: "pending"
    })
    const tried = make(1000, 3, "boom", 4000, "dead", true, true).toEntry()
    assert.deepStrictEqual(tried, {
      id: "0b5a6a9e-3c1f-4b7e-9a51-5e2f0c8d7a10",
      seq: 7,
      message: {} as never,
      enqueuedAt: 1000,
      attempts: 3,
      status: "dead",
      lastError: "boom",
      nextAttemptAt: 4000,
      maybeSent: true
    })
  })
})
