/**
 * DeliveryQueue against the in-memory log: replay, order per recipient, concurrency, retries and
 * dead letters. Time is the TestClock (it starts at 0); coordination is Deferreds, never sleeps.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { DeliveryFailure } from "../../src/delivery/errors.js"
import { DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryEntry, OutboundMessage } from "../../src/delivery/types.js"
import { makeMemoryLog } from "./memoryLog.js"

const msg = (to: string, body: unknown, channel = "test"): OutboundMessage => ({ channel, to, body })

type Behaviour = (entry: DeliveryEntry, attempt: number) => Effect.Effect<void, DeliveryFailure>

/** A `deliver` that records every attempt (and successes) and behaves as `behave` says. */
const recorder = (behave: Behaviour = () => Effect.void) => {
  const attempts: Array<{ readonly id: string; readonly seq: number; readonly to: string; readonly body: unknown }> = []
  const succeeded: Array<{ readonly id: string; readonly seq: number; readonly to: string; readonly body: unknown }> =
    []
  const counts = new Map<string, number>()
  const deliver = (entry: DeliveryEntry) =>
    Effect.suspend(() => {
      const n = (counts.get(entry.id) ?? 0) + 1
      counts.set(entry.id, n)
      const row = { id: entry.id, seq: entry.seq, to: entry.message.to, body: entry.message.body }
      attempts.push(row)
      return Effect.tap(behave(entry, n), () => Effect.sync(() => succeeded.push(row)))
    })
  return { attempts, succeeded, deliver, counts }
}

const fail = (message: string, permanent = false) => Effect.fail(new DeliveryFailure({ message, permanent }))

describe("DeliveryQueue", () => {
  it.effect("enqueue returns once durable and delivers in the background", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const rec = recorder()
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver })
      const hold = log.hold("append")
      const fiber = yield* Effect.forkChild(q.enqueue(msg("a", 1)))
      yield* Deferred.await(hold.reached)
      assert.isUndefined(fiber.pollUnsafe(), "enqueue waits for the append")
      yield* hold.release
      const entry = yield* Fiber.join(fiber)
      assert.strictEqual(entry.status, "pending")
      yield* q.idle
      assert.deepStrictEqual(rec.succeeded.map((r) => r.id), [entry.id])
      assert.deepStrictEqual(log.acked, [entry.id])
      const stats = yield* q.stats
      assert.deepStrictEqual(stats, { pending: 0, dead: 0, inFlight: 0, delivered: 1 })
    }))

  it.effect("replay delivers pending entries oldest first", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const seeded = ["a", "b", "c", "d"].map((to, i) => log.seed({ message: msg(to, i), enqueuedAt: 0, attempts: 0 }))
      const later = log.seed({ message: msg("a", "a-second"), enqueuedAt: 0, attempts: 0 })
      const rec = recorder()
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, concurrency: 1 })
      yield* q.idle
      // One slot: recipients are served in the order of their oldest entry; a's two entries in seq order.
      assert.deepStrictEqual(rec.succeeded.map((r) => r.id), [
        seeded[0].id,
        later.id,
        seeded[1].id,
        seeded[2].id,
        seeded[3].id
      ])
      assert.deepStrictEqual((yield* log.pending).length, 0)
    }))

  it.effect("replay honours nextAttemptAt", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(100_000)
      const log = makeMemoryLog()
      const passed = log.seed({ message: msg("a", 1), enqueuedAt: 0, attempts: 1, nextAttemptAt: 99_000 })
      const future = log.seed({ message: msg("b", 2), enqueuedAt: 0, attempts: 1, nextAttemptAt: 110_000 })
      const rec = recorder()
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver })
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.map((r) => r.id), [passed.id])
      yield* TestClock.adjust(9_999)
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.map((r) => r.id), [passed.id], "not before nextAttemptAt")
      yield* TestClock.adjust(1)
      yield* q.idle
      assert.deepStrictEqual(rec.succeeded.map((r) => r.id), [passed.id, future.id])
    }))

  it.effect("entries of one recipient are delivered in seq order under failures and retries", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      // Entry i fails (transiently) (i * 7) % 3 times; the others of "a" must wait for it each time.
      const failures = (body: number) => (body * 7) % 3
      const rec = recorder((entry, n) => n <= failures(entry.message.body as number) ? fail(`no ${n}`) : Effect.void)
      const q = yield* DeliveryQueue.make({
        log,
        deliver: rec.deliver,
        backoffMs: [100, 200],
        jitter: 0,
        maxAttempts: 10
      })
      const entries: Array<DeliveryEntry> = []
      for (let i = 0; i < 8; i++) entries.push(yield* q.enqueue(msg("a", i)))
      for (let round = 0; round < 40 && rec.succeeded.length < 8; round++) {
        yield* q.idle
        yield* TestClock.adjust(100)
      }
      assert.deepStrictEqual(rec.succeeded.map((r) => r.seq), entries.map((e) => e.seq))
      // Every attempt of entry i (its failures, then its success) comes before any attempt of entry i + 1.
      const expected = entries.flatMap((e, i) => Array.from({ length: failures(i) + 1 }, () => e.id))
      assert.deepStrictEqual(rec.attempts.map((r) => r.id), expected)
      assert.deepStrictEqual(log.acked, entries.map((e) => e.id))
    }))

  it.effect("a failing head blocks later entries of its recipient but not other recipients", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const rec = recorder((entry, n) => entry.message.body === "a1" && n === 1 ? fail("down") : Effect.void)
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, backoffMs: [1_000], jitter: 0 })
      const a1 = yield* q.enqueue(msg("a", "a1"))
      const a2 = yield* q.enqueue(msg("a", "a2"))
      const b1 = yield* q.enqueue(msg("b", "b1"))
      yield* q.idle
      assert.deepStrictEqual(rec.succeeded.map((r) => r.id), [b1.id])
      assert.deepStrictEqual(rec.attempts.map((r) => r.id), [a1.id, b1.id], "a2 waits behind a1")
      yield* TestClock.adjust(999)
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.map((r) => r.id), [a1.id, b1.id], "a2 still waits for a1's backoff")
      yield* TestClock.adjust(1)
      yield* q.idle
      assert.deepStrictEqual(rec.succeeded.map((r) => r.id), [b1.id, a1.id, a2.id])
    }))

  it.effect("recipients run side by side up to concurrency", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const gate = yield* Deferred.make<void>()
      let running = 0
      let peak = 0
      const reached: Array<string> = []
      const rec = recorder((entry) =>
        Effect.gen(function*() {
          running++
          peak = Math.max(peak, running)
          reached.push(entry.message.to)
          yield* Deferred.await(gate)
          running--
        })
      )
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, concurrency: 3 })
      for (const to of ["a", "b", "c", "d", "e"]) yield* q.enqueue(msg(to, to))
      yield* q.enqueue(msg("a", "a-second"))
      while (reached.length < 3) yield* Effect.yieldNow
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow
      assert.deepStrictEqual(reached, ["a", "b", "c"])
      assert.strictEqual((yield* q.stats).inFlight, 3)
      yield* Deferred.succeed(gate, undefined)
      yield* q.idle
      assert.strictEqual(peak, 3)
      assert.strictEqual(rec.succeeded.length, 6)
      assert.deepStrictEqual(rec.succeeded.filter((r) => r.to === "a").map((r) => r.body), ["a", "a-second"])
    }))

  it.effect("a busy recipient hands its slot on after a batch so others are not starved", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      for (let i = 0; i < 40; i++) log.seed({ message: msg("busy", i), enqueuedAt: 0, attempts: 0 })
      const other = log.seed({ message: msg("other", "x"), enqueuedAt: 0, attempts: 0 })
      const rec = recorder()
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, concurrency: 1 })
      yield* q.idle
      const order = rec.succeeded.map((r) => r.id)
      assert.strictEqual(order.length, 41)
      assert.strictEqual(order.indexOf(other.id), 32, "after 32 in a row, the waiting recipient goes next")
      assert.deepStrictEqual(
        rec.succeeded.filter((r) => r.to === "busy").map((r) => r.body),
        Array.from({ length: 40 }, (_, i) => i)
      )
    }))

  it.effect("backoff follows backoffMs with the last value repeating", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const rec = recorder(() => fail("down"))
      const q = yield* DeliveryQueue.make({
        log,
        deliver: rec.deliver,
        backoffMs: [100, 200, 300],
        jitter: 0,
        maxAttempts: 6
      })
      const entry = yield* q.enqueue(msg("a", 1))
      for (let i = 0; i < 10; i++) {
        yield* q.idle
        yield* TestClock.adjust(300)
      }
      const delays = log.calls.flatMap((c) => c.op === "attempt" && !c.failed ? [c.nextAttemptAt - c.at] : [])
      // Five retried failures, then the sixth reaches maxAttempts (recorded with no wait, then dead).
      assert.deepStrictEqual(delays, [100, 200, 300, 300, 300, 0])
      assert.strictEqual(rec.attempts.length, 6)
      const dead = yield* log.dead
      assert.deepStrictEqual(dead.map((e) => [e.id, e.attempts]), [[entry.id, 6]])
    }))

  it.effect("jitter stays within ±jitter", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const rec = recorder(() => fail("down"))
      const q = yield* DeliveryQueue.make({
        log,
        deliver: rec.deliver,
        backoffMs: [1_000],
        jitter: 0.5,
        maxAttempts: 60
      })
      yield* q.enqueue(msg("a", 1))
      for (let i = 0; i < 70; i++) {
        yield* q.idle
        yield* TestClock.adjust(1_500)
      }
      const delays = log.calls.flatMap((c) =>
        c.op === "attempt" && !c.failed && c.nextAttemptAt > c.at ? [c.nextAttemptAt - c.at] : []
      )
      assert.strictEqual(delays.length, 59)
      for (const d of delays) assert.isTrue(d >= 500 && d <= 1_500, `delay ${d} outside 1000 ms ± 50 %`)
      assert.isAbove(new Set(delays).size, 10, "delays are actually jittered")
      assert.isBelow(Math.min(...delays), 800)
      assert.isAbove(Math.max(...delays), 1_200)
    }))

  it.effect("a permanent failure goes to dead at once", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const rec = recorder((entry) => entry.message.body === 1 ? fail("no such chat", true) : Effect.void)
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver })
      const first = yield* q.enqueue(msg("a", 1))
      const second = yield* q.enqueue(msg("a", 2))
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.map((r) => r.id), [first.id, second.id])
      const dead = yield* log.dead
      assert.deepStrictEqual(dead.map((e) => [e.id, e.status, e.attempts, e.lastError]), [[
        first.id,
        "dead",
        1,
        "no such chat"
      ]])
      assert.deepStrictEqual(yield* q.stats, { pending: 0, dead: 1, inFlight: 0, delivered: 1 })
    }))

  it.effect("maxAttempts moves an entry to dead", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const rec = recorder((entry) => entry.message.body === 1 ? fail("down") : Effect.void)
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, backoffMs: [10], jitter: 0, maxAttempts: 3 })
      const first = yield* q.enqueue(msg("a", 1))
      const second = yield* q.enqueue(msg("a", 2))
      for (let i = 0; i < 5; i++) {
        yield* q.idle
        yield* TestClock.adjust(10)
      }
      assert.deepStrictEqual(rec.attempts.map((r) => r.id), [first.id, first.id, first.id, second.id])
      const dead = yield* log.dead
      assert.deepStrictEqual(dead.map((e) => [e.id, e.attempts, e.lastError]), [[first.id, 3, "down"]])
      assert.deepStrictEqual(log.acked, [second.id])
    }))

  it.effect("a deliver that hangs past attemptTimeoutMs is interrupted and retried", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      let interrupted = 0
      const rec = recorder((_, n) =>
        n === 1 ? Effect.onInterrupt(Effect.never, () => Effect.sync(() => interrupted++)) : Effect.void
      )
      const q = yield* DeliveryQueue.make({
        log,
        deliver: rec.deliver,
        attemptTimeoutMs: 1_000,
        backoffMs: [50],
        jitter: 0
      })
      const entry = yield* q.enqueue(msg("a", 1))
      while (rec.attempts.length < 1) yield* Effect.yieldNow
      yield* TestClock.adjust(999)
      assert.strictEqual(interrupted, 0)
      assert.strictEqual((yield* q.stats).inFlight, 1)
      yield* TestClock.adjust(1)
      yield* q.idle
      assert.strictEqual(interrupted, 1)
      const recorded = log.calls.find((c) => c.op === "attempt")
      assert.strictEqual(recorded?.op === "attempt" && recorded.error, "deliver timed out after 1000 ms")
      yield* TestClock.adjust(50)
      yield* q.idle
      assert.deepStrictEqual(rec.succeeded.map((r) => r.id), [entry.id])
      assert.deepStrictEqual(log.acked, [entry.id])
    }))

  it.effect("a defect in deliver counts as a failed attempt, not a crash", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const rec = recorder((_, n) => n === 1 ? Effect.die(new Error("boom")) : Effect.void)
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, backoffMs: [10], jitter: 0 })
      const entry = yield* q.enqueue(msg("a", 1))
      yield* q.idle
      const recorded = log.calls.find((c) => c.op === "attempt")
      assert.strictEqual(recorded?.op === "attempt" && recorded.error, "deliver died: boom")
      yield* TestClock.adjust(10)
      yield* q.idle
      assert.deepStrictEqual(log.acked, [entry.id])
      // A deliver that throws synchronously is a defect too.
      const thrower = yield* DeliveryQueue.make({
        log: makeMemoryLog(),
        deliver: () => {
          throw new Error("sync boom")
        },
        maxAttempts: 1
      })
      yield* thrower.enqueue(msg("b", 1))
      yield* thrower.idle
      assert.strictEqual((yield* thrower.stats).dead, 1)
    }))

  it.effect("retryDead puts dead entries back and delivers them", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      let accept = false
      const rec = recorder(() => accept ? Effect.void : fail("blocked", true))
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver })
      const a = yield* q.enqueue(msg("a", 1))
      const b = yield* q.enqueue(msg("b", 2))
      const c = yield* q.enqueue(msg("c", 3))
      yield* q.idle
      assert.strictEqual((yield* q.stats).dead, 3)
      accept = true
      assert.strictEqual(yield* q.retryDead(b.id), 1)
      yield* q.idle
      assert.deepStrictEqual(log.acked, [b.id])
      const gone = yield* Effect.flip(q.retryDead(b.id))
      assert.strictEqual(gone.reason, "unknown-id", "an acked entry has left the log")
      assert.strictEqual(yield* q.retryDead(), 2)
      yield* q.idle
      assert.deepStrictEqual([...log.acked].sort(), [a.id, b.id, c.id].sort())
      assert.deepStrictEqual(yield* q.stats, { pending: 0, dead: 0, inFlight: 0, delivered: 3 })
      const unknown = yield* Effect.flip(q.retryDead("nope"))
      assert.strictEqual(unknown.reason, "unknown-id")
      // A pending entry is not dead: nothing to requeue.
      const blocked = yield* DeliveryQueue.make({ log, deliver: () => Effect.never, attemptTimeoutMs: 60_000 })
      const pending = yield* blocked.enqueue(msg("d", 4))
      assert.strictEqual(yield* blocked.retryDead(pending.id), 0)
    }))

  it.effect("retryDead() requeues every dead entry of a recipient and delivers them in seq order", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      let accept = false
      const rec = recorder(() => (accept ? Effect.void : fail("blocked", true)))
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver })
      const entries: Array<DeliveryEntry> = []
      for (let i = 0; i < 6; i++) entries.push(yield* q.enqueue(msg("a", i)))
      yield* q.idle
      assert.strictEqual((yield* log.dead).length, 6)
      accept = true
      assert.strictEqual(yield* q.retryDead(), 6)
      yield* q.idle
      assert.deepStrictEqual(rec.succeeded.map((r) => r.seq), entries.map((e) => e.seq))
      assert.deepStrictEqual(yield* q.stats, { pending: 0, dead: 0, inFlight: 0, delivered: 6 })
    }))

  it.effect("retryDead puts an entry back in seq order ahead of later entries waiting for backoff", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      let accept = false
      const rec = recorder((entry, n) =>
        entry.message.body === 1
          ? (accept ? Effect.void : fail("blocked", true))
          : n === 1
          ? fail("later")
          : Effect.void
      )
      const q = yield* DeliveryQueue.make({ log, deliver: rec.deliver, backoffMs: [1_000], jitter: 0 })
      const first = yield* q.enqueue(msg("a", 1))
      const second = yield* q.enqueue(msg("a", 2))
      yield* q.idle
      assert.deepStrictEqual(rec.attempts.map((r) => r.id), [first.id, second.id], "first dead, second in backoff")
      accept = true
      assert.strictEqual(yield* q.retryDead(first.id), 1)
      yield* q.idle
      assert.deepStrictEqual(log.acked, [first.id], "the older entry goes first, at once")
      yield* TestClock.adjust(1_000)
      yield* q.idle
      assert.deepStrictEqual(log.acked, [first.id, second.id])
    }))
})
