/**
 * DeliveryQueue with no option but `log` and `deliver`: the defaults of delivery.md (`concurrency` 8,
 * `attemptTimeoutMs` 30 s, `backoffMs` 5 s, 25 s, 2 min, 10 min with the last repeating, `jitter` 0.2,
 * `maxAttempts` 5). Time is the TestClock; the in-memory log records every call.
 */
import { assert, describe, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Option } from "effect"
import { TestClock } from "effect/testing"
import { DeliveryFailure, DeliveryQueue } from "../../src/delivery/index.js"
import type { OutboundMessage } from "../../src/delivery/index.js"
import { makeMemoryLog } from "./memoryLog.js"

const msg = (to: string): OutboundMessage => ({ channel: "test", to, body: to })

describe("DeliveryQueue defaults", () => {
  it.effect("backoff 5 s, 25 s, 2 min, 10 min, each within ±20 %; the 5th failed attempt is the last (dead)", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      let attempts = 0
      const q = yield* DeliveryQueue.make({
        log,
        deliver: () => Effect.suspend(() => (attempts++, Effect.fail(new DeliveryFailure({ message: "down" }))))
      })
      const entry = yield* q.enqueue(msg("a"))
      const steps = [5_000, 25_000, 120_000, 600_000]
      for (const step of steps) {
        yield* q.idle
        const now = yield* Clock.currentTimeMillis
        const e = Option.getOrThrow(yield* log.get(entry.id))
        assert.strictEqual(e.status, "pending")
        const delay = e.nextAttemptAt! - now
        assert.isTrue(delay >= step * 0.8 && delay <= step * 1.2, `delay ${delay} outside ${step} ms ± 20 %`)
        yield* TestClock.adjust(delay - 1)
        yield* q.idle
        assert.strictEqual(Option.getOrThrow(yield* log.get(entry.id)).attempts, e.attempts, "not before its time")
        yield* TestClock.adjust(1)
      }
      yield* q.idle
      assert.strictEqual(attempts, 5)
      const dead = Option.getOrThrow(yield* log.get(entry.id))
      assert.deepStrictEqual([dead.status, dead.attempts, dead.lastError], ["dead", 5, "down"])
    }))

  it.effect("the last backoff step repeats (a higher maxAttempts): 10 min ± 20 %", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const q = yield* DeliveryQueue.make({
        log,
        deliver: () => Effect.fail(new DeliveryFailure({ message: "down" })),
        maxAttempts: 7
      })
      const entry = yield* q.enqueue(msg("a"))
      for (let i = 0; i < 6; i++) {
        yield* q.idle
        const e = Option.getOrThrow(yield* log.get(entry.id))
        const delay = e.nextAttemptAt! - (yield* Clock.currentTimeMillis)
        if (i >= 3) assert.isTrue(delay >= 480_000 && delay <= 720_000, `delay ${delay} after attempt ${i + 1}`)
        yield* TestClock.adjust(delay)
      }
    }))

  it.effect("attemptTimeoutMs 30 s: an attempt that never ends is interrupted at 30 s and counted as failed", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const started = yield* Deferred.make<void>()
      const gate = yield* Deferred.make<void>()
      const q = yield* DeliveryQueue.make({
        log,
        deliver: () => Effect.andThen(Deferred.succeed(started, undefined), Deferred.await(gate))
      })
      // Added after the queue's, so it runs first: a failed assertion does not leave the close waiting.
      yield* Effect.addFinalizer(() => Deferred.succeed(gate, undefined))
      const entry = yield* q.enqueue(msg("a"))
      yield* Deferred.await(started)
      yield* TestClock.adjust(29_999)
      assert.strictEqual((yield* q.stats).inFlight, 1)
      assert.strictEqual(Option.getOrThrow(yield* log.get(entry.id)).attempts, 0)
      yield* TestClock.adjust(1)
      yield* q.idle
      const e = Option.getOrThrow(yield* log.get(entry.id))
      assert.strictEqual(e.attempts, 1)
      assert.strictEqual((yield* q.stats).inFlight, 0)
    }))

  it.effect("concurrency 8: ten recipients, eight in flight at once", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const gate = yield* Deferred.make<void>()
      let reached = 0
      const q = yield* DeliveryQueue.make({
        log,
        deliver: () => Effect.andThen(Effect.sync(() => reached++), Deferred.await(gate))
      })
      yield* Effect.addFinalizer(() => Deferred.succeed(gate, undefined))
      for (let i = 0; i < 10; i++) yield* q.enqueue(msg(`r${i}`))
      while (reached < 8) yield* Effect.yieldNow
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow
      assert.strictEqual(reached, 8)
      assert.strictEqual((yield* q.stats).inFlight, 8)
      yield* Deferred.succeed(gate, undefined)
      yield* q.idle
      assert.deepStrictEqual(yield* q.stats, { pending: 0, dead: 0, inFlight: 0, delivered: 10 })
    }))
})
