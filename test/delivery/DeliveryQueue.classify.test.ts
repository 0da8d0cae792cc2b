/**
 * The queue's `classify` option and the default classifier: HTTP status rules, `Retry-After` (seconds,
 * HTTP date, `retryAfterMs`) replacing the backoff step within its bounds. Time is the TestClock.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { TestClock } from "effect/testing"
import { DeliveryFailure, DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"
import { makeMemoryLog } from "./memoryLog.js"

const entry: DeliveryEntry = {
  id: "e",
  seq: 1,
  message: { channel: "c", to: "t", body: 1 },
  enqueuedAt: 0,
  attempts: 0,
  status: "pending"
}
const classify = (e: unknown, now = 0) => DeliveryQueue.defaultClassify(e, entry, now)

describe("DeliveryQueue.defaultClassify", () => {
  it("4xx is permanent except 408, 409, 425, 429; 5xx and no status retry", () => {
    for (const status of [400, 401, 403, 404, 410, 413, 422, 499]) {
      assert.isTrue(classify(new DeliveryFailure({ message: "x", status })).permanent, `status ${status}`)
    }
    for (const status of [408, 409, 425, 429, 500, 502, 503, 504, 599]) {
      assert.isFalse(classify(new DeliveryFailure({ message: "x", status })).permanent, `status ${status}`)
    }
    assert.isFalse(classify(new DeliveryFailure({ message: "ECONNRESET" })).permanent)
    assert.isFalse(classify(Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" })).permanent)
    assert.isFalse(classify("a string").permanent)
    assert.isFalse(classify(undefined).permanent)
  })

  it("permanent, when set, decides over the status", () => {
    assert.isFalse(classify(new DeliveryFailure({ message: "x", status: 400, permanent: false })).permanent)
    assert.isTrue(classify(new DeliveryFailure({ message: "x", status: 503, permanent: true })).permanent)
    assert.isTrue(classify(new DeliveryFailure({ message: "x", permanent: true })).permanent)
  })

  it("reads status and Retry-After from any error shape (statusCode, response, headers)", () => {
    assert.isTrue(classify({ statusCode: 404 }).permanent)
    assert.isTrue(classify({ response: { status: 403 } }).permanent)
    assert.deepStrictEqual(classify({ status: 429, headers: new Headers({ "Retry-After": "3" }) }), {
      permanent: false,
      retryAfterMs: 3000
    })
    assert.deepStrictEqual(classify({ status: 503, headers: { "retry-after": "2" } }), {
      permanent: false,
      retryAfterMs: 2000
    })
    assert.deepStrictEqual(classify({ response: { status: 429, headers: { "Retry-After": "1" } } }), {
      permanent: false,
      retryAfterMs: 1000
    })
  })

  it("Retry-After: retryAfterMs, delay-seconds or an HTTP date counted from now; garbage is ignored", () => {
    assert.strictEqual(
      classify(new DeliveryFailure({ message: "x", status: 429, retryAfterMs: 1234 })).retryAfterMs,
      1234
    )
    assert.strictEqual(
      classify(new DeliveryFailure({ message: "x", status: 429, retryAfter: "120" })).retryAfterMs,
      120_000
    )
    const now = Date.UTC(2026, 0, 1, 12, 0, 0)
    const date = new Date(now + 9_000).toUTCString()
    assert.strictEqual(
      classify(new DeliveryFailure({ message: "x", status: 503, retryAfter: date }), now).retryAfterMs,
      9_000
    )
    const past = new Date(now - 60_000).toUTCString()
    assert.strictEqual(
      classify(new DeliveryFailure({ message: "x", status: 503, retryAfter: past }), now).retryAfterMs,
      0
    )
    assert.isUndefined(classify(new DeliveryFailure({ message: "x", status: 503, retryAfter: "soon" })).retryAfterMs)
    assert.isUndefined(classify(new DeliveryFailure({ message: "x", status: 503, retryAfter: "-5" })).retryAfterMs)
    assert.isUndefined(
      classify(new DeliveryFailure({ message: "x", status: 503, retryAfterMs: Number.NaN })).retryAfterMs
    )
  })
})

type AttemptCall = { readonly op: "attempt"; readonly nextAttemptAt: number; readonly at: number }

/** A queue whose deliver fails the first attempt with `error` and then succeeds; returns the recorded attempt. */
const firstRetry = (error: unknown, options: { readonly defect?: boolean } = {}) =>
  Effect.gen(function*() {
    const log = makeMemoryLog()
    let calls = 0
    const q = yield* DeliveryQueue.make({
      log,
      backoffMs: [10_000, 40_000],
      jitter: 0,
      deliver: () =>
        Effect.suspend(() => {
          calls++
          if (calls > 1) return Effect.void
          return options.defect === true ? Effect.die(error) : Effect.fail(error as DeliveryFailure)
        })
    })
    yield* q.enqueue({ channel: "c", to: "t", body: 1 })
    yield* q.idle
    const attempt = log.calls.find((c) => c.op === "attempt") as AttemptCall | undefined
    assert.isDefined(attempt)
    return { log, q, attempt: attempt!, calls: () => calls }
  })

describe("DeliveryQueue classify", () => {
  it.effect("a 400 goes to dead after one attempt; a 429 and a 500 retry after the backoff step", () =>
    Effect.gen(function*() {
      const bad = yield* firstRetry(new DeliveryFailure({ message: "POST answered 400", status: 400 }))
      assert.strictEqual(bad.calls(), 1)
      const dead = yield* bad.log.dead
      assert.deepStrictEqual(dead.map((e) => [e.attempts, e.lastError]), [[1, "POST answered 400"]])
      for (const status of [429, 500]) {
        const r = yield* firstRetry(new DeliveryFailure({ message: `answered ${status}`, status }))
        assert.strictEqual(r.attempt.nextAttemptAt - r.attempt.at, 10_000, `status ${status}: the backoff step`)
        yield* TestClock.adjust(10_000)
        yield* r.q.idle
        assert.strictEqual(r.calls(), 2, `status ${status} retried`)
        assert.strictEqual(r.log.acked.length, 1)
      }
    }))

  it.effect("Retry-After replaces the step, kept within [step / 4, last step]", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [DeliveryFailure, number]> = [
        [new DeliveryFailure({ message: "x", status: 429, retryAfter: "7" }), 7_000],
        [new DeliveryFailure({ message: "x", status: 429, retryAfterMs: 3_000 }), 3_000],
        [new DeliveryFailure({ message: "x", status: 429, retryAfterMs: 100 }), 2_500], // step 10 s / 4
        [new DeliveryFailure({ message: "x", status: 503, retryAfter: "3600" }), 40_000], // the last step
        [new DeliveryFailure({ message: "x", status: 503 }), 10_000]
      ]
      for (const [error, wait] of cases) {
        const r = yield* firstRetry(error)
        assert.strictEqual(r.attempt.nextAttemptAt - r.attempt.at, wait, JSON.stringify(error))
        yield* TestClock.adjust(wait - 1)
        yield* r.q.idle
        assert.strictEqual(r.calls(), 1, "not before the wait")
        yield* TestClock.adjust(1)
        yield* r.q.idle
        assert.strictEqual(r.calls(), 2, "due at the wait")
      }
    }))

  it.effect("an HTTP-date Retry-After is counted from the queue's clock", () =>
    Effect.gen(function*() {
      const now = Date.UTC(2026, 5, 1, 8, 0, 0)
      yield* TestClock.setTime(now)
      const r = yield* firstRetry(
        new DeliveryFailure({ message: "x", status: 503, retryAfter: new Date(now + 15_000).toUTCString() })
      )
      assert.strictEqual(r.attempt.nextAttemptAt - now, 15_000)
    }))

  it.effect("a defect and a timeout go through classify too", () =>
    Effect.gen(function*() {
      const died = yield* firstRetry(Object.assign(new Error("boom"), { status: 404 }), { defect: true })
      assert.strictEqual(died.calls(), 1)
      assert.deepStrictEqual((yield* died.log.dead).map((e) => e.lastError), ["deliver died: boom"])
      const log = makeMemoryLog()
      const seen: Array<unknown> = []
      const q = yield* DeliveryQueue.make({
        log,
        attemptTimeoutMs: 1_000,
        classify: (error) => {
          seen.push(error)
          return { permanent: true }
        },
        deliver: () => Effect.never
      })
      yield* q.enqueue({ channel: "c", to: "t", body: 1 })
      yield* TestClock.adjust(1_000)
      yield* q.idle
      assert.strictEqual(seen.length, 1)
      assert.instanceOf(seen[0], DeliveryFailure)
      assert.deepStrictEqual((yield* log.dead).map((e) => e.lastError), ["deliver timed out after 1000 ms"])
    }))

  it.effect("a custom classify sees the error and the entry; its retryAfterMs is clamped the same way", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const seen: Array<readonly [unknown, string]> = []
      let calls = 0
      const q = yield* DeliveryQueue.make({
        log,
        backoffMs: [8_000],
        jitter: 0,
        classify: (error, e) => {
          seen.push([error, e.id])
          return { permanent: false, retryAfterMs: 1 }
        },
        deliver:
          () => (++calls === 1 ? Effect.fail(new DeliveryFailure({ message: "nope", status: 400 })) : Effect.void)
      })
      const e = yield* q.enqueue({ channel: "c", to: "t", body: 1 })
      yield* q.idle
      assert.strictEqual(seen.length, 1)
      assert.strictEqual(seen[0][1], e.id)
      assert.strictEqual((seen[0][0] as DeliveryFailure).status, 400)
      const attempt = log.calls.find((c) => c.op === "attempt") as AttemptCall
      assert.strictEqual(attempt.nextAttemptAt - attempt.at, 2_000, "400 retried as told, after step / 4")
      yield* TestClock.adjust(2_000)
      yield* q.idle
      assert.deepStrictEqual(log.acked, [e.id])
    }))

  it.effect("a classify that throws falls back to the default classifier", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const q = yield* DeliveryQueue.make({
        log,
        classify: () => {
          throw new Error("bug in classify")
        },
        deliver: () => Effect.fail(new DeliveryFailure({ message: "gone", status: 410 }))
      })
      yield* q.enqueue({ channel: "c", to: "t", body: 1 })
      yield* q.idle
      assert.deepStrictEqual((yield* log.dead).map((e) => [e.attempts, e.lastError]), [[1, "gone"]])
    }))

  it.effect("classify that is not a function is a defect naming it", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(
        Effect.scoped(DeliveryQueue.make({ log: makeMemoryLog(), deliver: () => Effect.void, classify: 5 as never }))
      )
      assert.isTrue(Exit.isFailure(exit))
      assert.include(Exit.isFailure(exit) ? String(exit.cause) : "", "classify")
    }))
})
