/**
 * DeliveryQueue against the in-memory log: idle, shutdown, log failures, stats, options, idempotency.
 * Time is the TestClock; coordination is Deferreds, never sleeps.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Scope } from "effect"
import { TestClock } from "effect/testing"
import { DeliveryFailure } from "../../src/delivery/errors.js"
import { DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryEntry, OutboundMessage } from "../../src/delivery/types.js"
import { withWarnings } from "./fixtures/files.js"
import { makeMemoryLog } from "./memoryLog.js"

const msg = (to: string, body: unknown, channel = "test"): OutboundMessage => ({ channel, to, body })

/** Lets other fibers run until `cond` holds (or `rounds` yields passed: then only asserts when `cond` must hold). */
const waitFor = (cond: () => boolean, rounds?: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < (rounds ?? 10_000) && !cond(); i++) yield* Effect.yieldNow
    if (rounds === undefined) assert.isTrue(cond(), "condition reached")
  })

describe("DeliveryQueue lifecycle", () => {
  it.effect("idle waits for due and in-flight work only", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const gate = yield* Deferred.make<void>()
      const reached = yield* Deferred.make<void>()
      const deliver = (entry: DeliveryEntry) =>
        entry.message.to === "slow"
          ? Effect.andThen(Deferred.succeed(reached, undefined), Deferred.await(gate))
          : Effect.fail(new DeliveryFailure({ message: "down" }))
      const q = yield* DeliveryQueue.make({ log, deliver, backoffMs: [60_000], jitter: 0 })
      yield* q.idle // nothing at all: returns at once
      yield* q.enqueue(msg("slow", 1))
      yield* Deferred.await(reached)
      const idle = yield* Effect.forkChild(q.idle)
      yield* waitFor(() => false, 100)
      assert.isUndefined(idle.pollUnsafe(), "an attempt in flight keeps idle waiting")
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(idle)
      assert.deepStrictEqual(yield* q.stats, { pending: 0, dead: 0, inFlight: 0, delivered: 1 })
      // An entry waiting for a future backoff is pending but not due: idle returns.
      yield* q.enqueue(msg("failing", 2))
      yield* q.idle
      assert.deepStrictEqual(yield* q.stats, { pending: 1, dead: 0, inFlight: 0, delivered: 1 })
      // Once its backoff passes it is due again, and idle waits for that attempt too.
      yield* TestClock.adjust(60_000)
      yield* q.idle
      const attempts = log.calls.filter((c) => c.op === "attempt").length
      assert.strictEqual(attempts, 2)
    }))

  it.effect("closing the scope lets in-flight attempts end, flushes, and leaves pending entries in the log", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const gate = yield* Deferred.make<void>()
      const reached = yield* Deferred.make<void>()
      const delivered: Array<unknown> = []
      let interrupted = false
      const deliver = (entry: DeliveryEntry) =>
        Effect.gen(function*() {
          yield* Deferred.succeed(reached, undefined)
          yield* Deferred.await(gate)
          delivered.push(entry.message.body)
        }).pipe(Effect.onInterrupt(() => Effect.sync(() => (interrupted = true))))
      const scope = yield* Scope.make()
      const q = yield* DeliveryQueue.make({ log, deliver, concurrency: 1 }).pipe(Scope.provide(scope))
      const first = yield* q.enqueue(msg("a", 1))
      const second = yield* q.enqueue(msg("a", 2))
      const other = yield* q.enqueue(msg("b", 3))
      yield* Deferred.await(reached)
      // Finalizers run last-in first-out: this one announces that the queue's own is next.
      const closeBegan = yield* Deferred.make<void>()
      yield* Scope.addFinalizer(scope, Deferred.succeed(closeBegan, undefined))
      const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void))
      yield* Deferred.await(closeBegan)
      yield* waitFor(() => false, 100)
      assert.isUndefined(closing.pollUnsafe(), "close waits for the attempt in flight")
      assert.isFalse(log.calls.some((c) => c.op === "flush"))
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(closing)
      assert.isFalse(interrupted)
      assert.deepStrictEqual(delivered, [1], "no new attempt after close began")
      assert.deepStrictEqual(log.acked, [first.id], "the attempt in flight was recorded")
      assert.isTrue(log.calls.some((c) => c.op === "flush"), "the log was flushed")
      assert.deepStrictEqual((yield* log.pending).map((e) => e.id), [second.id, other.id])
      yield* q.idle // a closed queue is idle
    }))

  it.effect("closing the scope bounds an in-flight attempt by attemptTimeoutMs", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const reached = yield* Deferred.make<void>()
      const scope = yield* Scope.make()
      const q = yield* DeliveryQueue.make({
        log,
        deliver: () => Effect.andThen(Deferred.succeed(reached, undefined), Effect.never),
        attemptTimeoutMs: 5_000
      }).pipe(Scope.provide(scope))
      const entry = yield* q.enqueue(msg("a", 1))
      yield* Deferred.await(reached)
      const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void))
      yield* TestClock.adjust(4_999)
      assert.isUndefined(closing.pollUnsafe())
      yield* TestClock.adjust(1)
      yield* Fiber.join(closing)
      const pending = yield* log.pending
      assert.deepStrictEqual(pending.map((e) => [e.id, e.attempts, e.lastError]), [[
        entry.id,
        1,
        "deliver timed out after 5000 ms"
      ]])
    }))

  it.effect("a failing ack does not lose or reorder the entry", () =>
    withWarnings((warnings) =>
      Effect.gen(function*() {
        const log = makeMemoryLog()
        const seen: Array<unknown> = []
        const q = yield* DeliveryQueue.make({ log, deliver: (e) => Effect.sync(() => seen.push(e.message.body)) })
        log.failNext("ack")
        const first = yield* q.enqueue(msg("a", 1))
        const second = yield* q.enqueue(msg("a", 2))
        const other = yield* q.enqueue(msg("b", 3))
        yield* q.idle
        assert.deepStrictEqual(seen, [1, 3], "b goes on; a's second entry waits for the first one's ack")
        assert.deepStrictEqual(log.acked, [other.id])
        assert.deepStrictEqual((yield* log.pending).map((e) => e.id), [first.id, second.id])
        log.failNext("ack")
        yield* TestClock.adjust(1_000) // first log retry: fails again
        yield* q.idle
        assert.deepStrictEqual(log.acked, [other.id])
        yield* TestClock.adjust(5_000) // second log retry: succeeds
        yield* q.idle
        assert.deepStrictEqual(seen, [1, 3, 2], "the entry was delivered once and not again")
        assert.deepStrictEqual(log.acked, [other.id, first.id, second.id])
        assert.deepStrictEqual(yield* q.stats, { pending: 0, dead: 0, inFlight: 0, delivered: 3 })
        assert.strictEqual(
          warnings.filter((w) => w.includes(`ack of entry ${first.id} failed (io`)).length,
          2,
          warnings.join("\n")
        )
      })
    ))

  it.effect("a failing attempt record keeps the entry and records it later", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      let calls = 0
      const q = yield* DeliveryQueue.make({
        log,
        deliver: () =>
          Effect.suspend(() => ++calls === 1 ? Effect.fail(new DeliveryFailure({ message: "down" })) : Effect.void),
        backoffMs: [100],
        jitter: 0
      })
      log.failNext("attempt")
      const entry = yield* q.enqueue(msg("a", 1))
      yield* q.idle
      assert.strictEqual(calls, 1)
      yield* TestClock.adjust(1_000)
      yield* q.idle
      const records = log.calls.filter((c) => c.op === "attempt").map((c) => c.failed)
      assert.deepStrictEqual(records, [true, false])
      assert.deepStrictEqual(log.acked, [entry.id])
      assert.strictEqual(calls, 2)
    }))

  it.effect("a failing final attempt (one record: attempt and dead) keeps the entry at the head until it is recorded", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const seen: Array<unknown> = []
      const q = yield* DeliveryQueue.make({
        log,
        deliver: (e) =>
          e.message.body === 1
            ? Effect.fail(new DeliveryFailure({ message: "gone", permanent: true }))
            : Effect.sync(() => seen.push(e.message.body))
      })
      log.failNext("attempt")
      const first = yield* q.enqueue(msg("a", 1))
      yield* q.enqueue(msg("a", 2))
      yield* q.idle
      assert.deepStrictEqual(seen, [])
      yield* TestClock.adjust(1_000)
      yield* q.idle
      assert.deepStrictEqual(seen, [2])
      assert.deepStrictEqual((yield* log.dead).map((e) => e.id), [first.id])
      assert.isFalse(log.calls.some((c) => c.op === "deadLetter"), "no second record for the move to dead")
    }))

  it.effect("an entry the log no longer knows is dropped from memory with a warning", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const seen: Array<unknown> = []
      const q = yield* DeliveryQueue.make({ log, deliver: (e) => Effect.sync(() => seen.push(e.message.body)) })
      log.failNext("ack", 1, "unknown-id")
      yield* q.enqueue(msg("a", 1))
      const second = yield* q.enqueue(msg("a", 2))
      yield* q.idle
      assert.deepStrictEqual(seen, [1, 2])
      assert.deepStrictEqual(log.acked, [second.id])
    }))

  it.effect("stats counts pending, dead, in flight and delivered", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const gate = yield* Deferred.make<void>()
      const reached = yield* Deferred.make<void>()
      const q = yield* DeliveryQueue.make({
        log,
        deliver: (e) =>
          e.message.to === "dead"
            ? Effect.fail(new DeliveryFailure({ message: "no", permanent: true }))
            : e.message.to === "slow"
            ? Effect.andThen(Deferred.succeed(reached, undefined), Deferred.await(gate))
            : Effect.void
      })
      yield* q.enqueue(msg("ok", 1))
      yield* q.enqueue(msg("dead", 2))
      yield* q.enqueue(msg("slow", 3))
      yield* Deferred.await(reached)
      yield* waitFor(() => log.acked.length === 1 && log.calls.some((c) => c.op === "attempt" && !c.failed))
      assert.deepStrictEqual(yield* q.stats, { pending: 1, dead: 1, inFlight: 1, delivered: 1 })
      yield* Deferred.succeed(gate, undefined)
      yield* q.idle
      assert.deepStrictEqual(yield* q.stats, { pending: 0, dead: 1, inFlight: 0, delivered: 2 })
    }))

  it.effect("concurrent enqueues are scheduled in seq order even when the log completes them out of order", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const seen: Array<unknown> = []
      const q = yield* DeliveryQueue.make({ log, deliver: (e) => Effect.sync(() => seen.push(e.message.body)) })
      const hold = log.hold("append")
      const first = yield* Effect.forkChild(q.enqueue(msg("a", 1)))
      yield* Deferred.await(hold.reached)
      const second = yield* q.enqueue(msg("a", 2)) // its append completes while the first one is held
      yield* q.idle
      assert.deepStrictEqual(seen, [], "the second entry waits for the first, which is not scheduled yet")
      yield* hold.release
      const firstEntry = yield* Fiber.join(first)
      assert.isBelow(firstEntry.seq, second.seq)
      yield* q.idle
      assert.deepStrictEqual(seen, [1, 2])
    }))

  it.effect("concurrent enqueues are scheduled in seq order even when a later call takes the lower seq", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog({ seqAt: "completion" })
      const seen: Array<number> = []
      const q = yield* DeliveryQueue.make({ log, deliver: (e) => Effect.sync(() => seen.push(e.seq)) })
      const hold = log.hold("append")
      const first = yield* Effect.forkChild(q.enqueue(msg("a", 1)))
      yield* Deferred.await(hold.reached)
      const second = yield* q.enqueue(msg("a", 2)) // started later, takes seq 1
      yield* q.idle
      assert.deepStrictEqual(seen, [], "seq 1 waits: the append in flight may still take a lower seq")
      yield* hold.release
      const firstEntry = yield* Fiber.join(first)
      assert.isBelow(second.seq, firstEntry.seq)
      yield* q.idle
      assert.deepStrictEqual(seen, [second.seq, firstEntry.seq])
    }))

  it.effect("enqueue is not interruptible: one interrupted mid-append still appends and schedules its entry", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const seen: Array<unknown> = []
      const q = yield* DeliveryQueue.make({ log, deliver: (e) => Effect.sync(() => seen.push(e.message.body)) })
      const hold = log.hold("append")
      const fiber = yield* Effect.forkChild(q.enqueue(msg("a", 1)))
      yield* Deferred.await(hold.reached)
      const interrupting = yield* Effect.forkChild(Fiber.interrupt(fiber))
      yield* waitFor(() => false, 50) // the interrupt arrives while the append is held
      assert.isUndefined(interrupting.pollUnsafe(), "interrupt waits for the enqueue to finish")
      yield* hold.release
      yield* Fiber.join(interrupting)
      yield* q.idle
      assert.deepStrictEqual(seen, [1])
      assert.strictEqual(log.acked.length, 1)
    }))

  it.effect("an enqueue with the idempotency key of a pending entry is not delivered twice", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const seen: Array<string> = []
      const q = yield* DeliveryQueue.make({ log, deliver: (e) => Effect.sync(() => seen.push(e.id)) })
      const a = yield* q.enqueue({ ...msg("a", 1), idempotencyKey: "k" })
      const b = yield* q.enqueue({ ...msg("a", 1), idempotencyKey: "k" })
      assert.strictEqual(a.id, b.id)
      yield* q.idle
      assert.deepStrictEqual(seen, [a.id])
    }))

  it.effect("invalid options fail make with a defect naming the option", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const deliver = () => Effect.void
      const cases: Array<[Partial<DeliveryQueue.Options>, string]> = [
        [{ concurrency: 0 }, "Expected `concurrency` to be an integer from 1 and up, got `0`"],
        [{ concurrency: 1.5 }, "Expected `concurrency` to be an integer from 1 and up, got `1.5`"],
        [
          { attemptTimeoutMs: -1 },
          "Expected `attemptTimeoutMs` to be a number above 0 (Infinity for no bound), got `-1`"
        ],
        [{ backoffMs: [] }, "Expected `backoffMs` to be a non-empty array of delays in ms, got `array`"],
        [{ backoffMs: [10, Number.NaN] }, "Expected `backoffMs[1]` to be a finite number from 0 and up, got `NaN`"],
        [{ jitter: 1.5 }, "Expected `jitter` to be a number from 0 through 1, got `1.5`"],
        [{ maxAttempts: 0 }, "Expected `maxAttempts` to be an integer from 1 and up, got `0`"]
      ]
      for (const [bad, message] of cases) {
        const exit = yield* Effect.exit(Effect.scoped(DeliveryQueue.make({ log, deliver, ...bad })))
        assert.isTrue(Exit.isFailure(exit))
        if (Exit.isFailure(exit)) {
          const defect = Cause.squash(exit.cause) as { readonly _tag: string; readonly message: string }
          assert.strictEqual(defect._tag, "LanesConfigInvalid")
          assert.strictEqual(defect.message, message)
        }
      }
    }))
})
