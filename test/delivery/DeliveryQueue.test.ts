/**
 * DeliveryQueue against the in-memory log: replay, order per recipient, concurrency, retries and
 * dead letters. Time is the TestClock (it starts at 0); coordination is Deferreds, never sleeps.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { DeliveryQueue } from "../../src/delivery/index.js"
import { DeliveryFailure } from "../../src/delivery/errors.js"
import type { DeliveryEntry, OutboundMessage } from "../../src/delivery/types.js"
import { makeMemoryLog } from "./memoryLog.js"

const msg = (to: string, body: unknown, channel = "test"): OutboundMessage => ({ channel, to, body })

type Behaviour = (entry: DeliveryEntry, attempt: number) => Effect.Effect<void, DeliveryFailure>

/** A `deliver` that records every attempt (and successes) and behaves as `behave` says. */
const recorder = (behave: Behaviour = () => Effect.void) => {
  const attempts: Array<{ readonly id: string; readonly seq: number; readonly to: string; readonly body: unknown }> = []
  const succeeded: Array<{ readonly id: string; readonly seq: number; readonly to: string; readonly body: unknown }> = []
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
      assert.deepStrictEqual(rec.succeeded.map((r) => r.id), [seeded[0].id, later.id, seeded[1].id, seeded[2].id, seeded[3].id])
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
})
