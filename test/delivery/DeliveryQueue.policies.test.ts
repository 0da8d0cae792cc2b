/**
 * The queue's outbox policies: `maxAgeMs` (expired -> dead), `replay` pacing (`maxPerSecond`,
 * `maxRecoveryMs`) and `retryNow`. Time is the TestClock; no sleeps.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Effect } from "effect"
import { TestClock } from "effect/testing"
import { DeliveryFailure, DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryEntry, OutboundMessage } from "../../src/delivery/types.js"
import { makeMemoryLog } from "./memoryLog.js"

const msg = (to: string, body: unknown, channel = "test"): OutboundMessage => ({ channel, to, body })

/** A deliver that records `[time, to, body]` of every attempt and fails while `failing(entry)` holds. */
const recorder = (failing: (entry: DeliveryEntry) => boolean = () => false) => {
  const attempts: Array<readonly [number, string, unknown]> = []
  const deliver = (entry: DeliveryEntry) =>
    Effect.flatMap(Clock.currentTimeMillis, (t) => {
      attempts.push([t, entry.message.to, entry.message.body])
      return failing(entry) ? Effect.fail(new DeliveryFailure({ message: "down" })) : Effect.void
    })
  return { attempts, deliver }
}

describe("DeliveryQueue maxAgeMs", () => {
  it.effect("at replay: an entry older than maxAgeMs goes to dead as expired without an attempt", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(100_000)
      const log = makeMemoryLog()
      const old = log.seed({
        message: msg("a", "old"),
        enqueuedAt: 40_000,
        attempts: 2,
        lastError: "down",
        nextAttemptAt: 90_000
      })
      const young = log.seed({ message: msg("b", "young"), enqueuedAt: 60_000, attempts: 0 })
      const rec = recorder()
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, maxAgeMs: 50_000 })
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.map((a) => a[2]), ["young"])
      const dead = yield* log.dead
      assert.deepStrictEqual(dead.map((e) => [e.id, e.lastError, e.attempts]), [[old.id, "expired", 2]])
      assert.deepStrictEqual(log.acked, [young.id])
    }))

  it.effect("before each attempt: an entry that aged past maxAgeMs while backing off goes to dead as expired", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const rec = recorder(() => true)
      const q = yield* DeliveryQueue.make({
        log,
        deliver: rec.deliver,
        backoffMs: [10_000],
        jitter: 0,
        maxAgeMs: 15_000
      })
      const e = yield* q.enqueue(msg("a", 1))
      yield* q.idle
      yield* TestClock.adjust(10_000)
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.map((a) => a[0]), [0, 10_000], "age 10 s: still attempted")
      assert.deepStrictEqual((yield* log.dead).length, 0)
      yield* TestClock.adjust(10_000)
      yield* q.idle
      assert.strictEqual(rec.attempts.length, 2, "age 20 s: no third attempt")
      assert.deepStrictEqual((yield* log.dead).map((d) => [d.id, d.lastError, d.attempts]), [[e.id, "expired", 2]])
      assert.deepStrictEqual(
        log.calls.filter((c) => c.op === "deadLetter").map((c) => c.op === "deadLetter" && c.reason),
        ["expired"]
      )
    }))

  it.effect("an expired head lets the entry behind it go", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const rec = recorder((e) => e.message.body === "first")
      const q = yield* DeliveryQueue.make({
        log,
        deliver: rec.deliver,
        backoffMs: [30_000],
        jitter: 0,
        maxAgeMs: 20_000
      })
      yield* q.enqueue(msg("a", "first"))
      yield* TestClock.adjust(5_000)
      yield* q.enqueue(msg("a", "second"))
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.map((a) => a[2]), ["first"], "second waits behind first")
      yield* TestClock.adjust(25_000)
      yield* q.idle
      // At 30 s the head is 30 s old: expired. The second is 25 s old: expired too, never attempted.
      assert.deepStrictEqual(rec.attempts.map((a) => a[2]), ["first"])
      assert.deepStrictEqual((yield* log.dead).map((d) => [d.message.body, d.lastError]), [["first", "expired"], [
        "second",
        "expired"
      ]])
    }))
})

describe("DeliveryQueue retryNow", () => {
  it.effect("makes matching pending entries due now, skipping the backoff; returns how many", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      let down = true
      const rec = recorder(() => down)
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, backoffMs: [60_000], jitter: 0 })
      yield* q.enqueue(msg("x", 1, "tg"))
      yield* q.enqueue(msg("y", 2, "tg"))
      yield* q.enqueue(msg("y", 3, "tg"))
      yield* q.enqueue(msg("x", 4, "mail"))
      yield* q.idle
      assert.strictEqual(rec.attempts.length, 3, "the heads failed once")
      down = false
      yield* TestClock.adjust(1_000)
      assert.strictEqual(yield* q.retryNow({ channel: "nothing" }), 0)
      assert.strictEqual(yield* q.retryNow({ channel: "tg", to: "x" }), 1)
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.slice(3), [[1_000, "x", 1]])
      assert.strictEqual(yield* q.retryNow({ channel: "tg" }), 2, "y's head and the entry behind it")
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.slice(4), [[1_000, "y", 2], [1_000, "y", 3]])
      assert.strictEqual(yield* q.retryNow(), 1)
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.slice(6), [[1_000, "x", 4]])
      assert.deepStrictEqual(yield* q.stats, { pending: 0, dead: 0, inFlight: 0, delivered: 4 })
      assert.strictEqual(yield* q.retryNow(), 0)
    }))
})

describe("DeliveryQueue replay pacing", () => {
  const seedTen = (log: ReturnType<typeof makeMemoryLog>) =>
    Array.from({ length: 10 }, (_, i) => log.seed({ message: msg(`r${i}`, i), enqueuedAt: 0, attempts: 0 }))

  it.effect("maxPerSecond: at most that many replayed entries begin an attempt each second, oldest first", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      seedTen(log)
      const rec = recorder()
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, replay: { maxPerSecond: 3 } })
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.map((a) => a[2]), [0, 1, 2])
      yield* TestClock.adjust(999)
      yield* q.idle
      assert.strictEqual(rec.attempts.length, 3, "not before the next second")
      for (const [t, n] of [[1_000, 6], [2_000, 9], [3_000, 10]] as const) {
        yield* TestClock.setTime(t)
        yield* q.idle
        assert.strictEqual(rec.attempts.length, n, `by ${t} ms`)
      }
      assert.deepStrictEqual(rec.attempts.map((a) => a[2]), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
      assert.deepStrictEqual(rec.attempts.map((a) => a[0]), [0, 0, 0, 1_000, 1_000, 1_000, 2_000, 2_000, 2_000, 3_000])
    }))

  it.effect("new messages are not paced: another recipient goes at once; a replayed recipient's new message goes after its old ones", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      seedTen(log)
      const rec = recorder()
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, replay: { maxPerSecond: 2 } })
      yield* q.idle
      yield* q.enqueue(msg("fresh", "new"))
      yield* q.enqueue(msg("r9", "r9-new"))
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.map((a) => a[2]), [0, 1, "new", 9, "r9-new"])
      yield* TestClock.adjust(1_000)
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.slice(5).map((a) => a[2]), [2, 3])
    }))

  it.effect("maxRecoveryMs: replay starts no old entries after it; they stay pending until retryNow or a new message", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      seedTen(log)
      const rec = recorder()
      const q = yield* DeliveryQueue.make({
        log,
        deliver: rec.deliver,
        replay: { maxPerSecond: 2, maxRecoveryMs: 2_500 }
      })
      for (let t = 0; t <= 10_000; t += 500) {
        yield* TestClock.setTime(t)
        yield* q.idle
      }
      assert.deepStrictEqual(rec.attempts.map((a) => a[2]), [0, 1, 2, 3, 4, 5])
      assert.deepStrictEqual(rec.attempts.map((a) => a[0]), [0, 0, 1_000, 1_000, 2_000, 2_000])
      assert.strictEqual((yield* q.stats).pending, 4, "the rest stay pending")
      yield* q.enqueue(msg("r7", "r7-new"))
      yield* q.idle
      assert.deepStrictEqual(
        rec.attempts.slice(6).map((a) => a[2]),
        [7, "r7-new"],
        "the old one first, then the new one"
      )
      assert.strictEqual(yield* q.retryNow(), 3)
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.slice(8).map((a) => a[2]), [6, 8, 9])
      assert.strictEqual((yield* q.stats).pending, 0)
    }))

  it.effect("maxRecoveryMs alone: everything replayed at once until the bound", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(50_000)
      const log = makeMemoryLog()
      const due = log.seed({ message: msg("a", "due"), enqueuedAt: 0, attempts: 1, nextAttemptAt: 40_000 })
      log.seed({ message: msg("b", "later"), enqueuedAt: 0, attempts: 1, nextAttemptAt: 60_000 })
      const rec = recorder()
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, replay: { maxRecoveryMs: 5_000 } })
      yield* q.idle
      assert.deepStrictEqual(log.acked, [due.id])
      yield* TestClock.adjust(20_000)
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.map((a) => a[2]), ["due"], "due after the recovery window: not started")
      assert.strictEqual((yield* q.stats).pending, 1)
    }))

  it.effect("bad replay options are a defect naming them", () =>
    Effect.gen(function*() {
      for (
        const [bad, field] of [
          [{ replay: { maxPerSecond: 0 } }, "replay.maxPerSecond"],
          [{ replay: { maxPerSecond: 1.5 } }, "replay.maxPerSecond"],
          [{ replay: { maxRecoveryMs: -1 } }, "replay.maxRecoveryMs"],
          [{ replay: 3 }, "replay"],
          [{ maxAgeMs: 0 }, "maxAgeMs"]
        ] as const
      ) {
        const exit = yield* Effect.exit(
          Effect.scoped(DeliveryQueue.make({ log: makeMemoryLog(), deliver: () => Effect.void, ...(bad as object) }))
        )
        assert.strictEqual(exit._tag, "Failure")
        assert.include(exit._tag === "Failure" ? String(exit.cause) : "", `\`${field}\``)
      }
    }))
})
