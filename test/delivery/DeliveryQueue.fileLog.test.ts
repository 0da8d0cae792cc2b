/**
 * DeliveryQueue over the real file log: enqueue, close the Scope mid-way (an attempt in flight, a
 * failed entry in backoff), re-open the log in the same directory, and a new queue replays and
 * delivers everything, in order per recipient, each entry exactly once (the close was clean).
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Scope } from "effect"
import { TestClock } from "effect/testing"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DeliveryFailure, DeliveryLog, DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"

const root = mkdtempSync(join(tmpdir(), "switchyard-queue-filelog-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const RECIPIENTS = ["alice", "bob", "carol"]
const PER_RECIPIENT = 8

describe("DeliveryQueue over the file log", () => {
  it.effect("after a close mid-way, a new queue on the re-opened log replays and delivers everything in order per recipient", () =>
    Effect.gen(function*() {
      const dir = join(root, "restart")
      const delivered: Array<{ readonly id: string; readonly to: string; readonly seq: number; readonly run: number }> =
        []
      const record = (entry: DeliveryEntry, run: number) =>
        Effect.sync(() => delivered.push({ id: entry.id, to: entry.message.to, seq: entry.seq, run }))

      // ---- first run: deliver a few, fail one (it waits in backoff), hold one in flight, then close ----
      const scope1 = yield* Scope.make()
      const log1 = yield* DeliveryLog.open({ dir }).pipe(Scope.provide(scope1))
      const gate = yield* Deferred.make<void>()
      const reached = yield* Deferred.make<void>()
      let calls = 0
      const deliver1 = (entry: DeliveryEntry) =>
        Effect.suspend(() => {
          calls++
          if (entry.message.to === "bob" && entry.message.body === 0) {
            return Effect.fail(new DeliveryFailure({ message: "bob is offline" }))
          }
          if (calls < 6) return record(entry, 1)
          // From the 6th call on, attempts hang until the gate opens (during the close).
          return Deferred.succeed(reached, undefined).pipe(
            Effect.andThen(Deferred.await(gate)),
            Effect.andThen(record(entry, 1))
          )
        })
      const q1 = yield* DeliveryQueue.make({
        log: log1,
        deliver: deliver1,
        concurrency: 2,
        backoffMs: [10_000],
        jitter: 0
      }).pipe(
        Scope.provide(scope1)
      )
      const all: Array<DeliveryEntry> = []
      for (let i = 0; i < PER_RECIPIENT; i++) {
        for (const to of RECIPIENTS) all.push(yield* q1.enqueue({ channel: "test", to, body: i }))
      }
      yield* Deferred.await(reached)
      const closeBegan = yield* Deferred.make<void>()
      yield* Scope.addFinalizer(scope1, Deferred.succeed(closeBegan, undefined))
      const closing = yield* Effect.forkChild(Scope.close(scope1, Exit.void))
      yield* Deferred.await(closeBegan)
      const callsAtClose = calls
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(closing)
      const firstRun = delivered.length
      assert.isAbove(firstRun, 0)
      assert.isBelow(firstRun, all.length, "the close came mid-way")
      assert.strictEqual(calls, callsAtClose, "no attempt started after the close began")

      // ---- second run: same directory, a new log and a new queue ----
      const log2 = yield* DeliveryLog.open({ dir })
      const pending = yield* log2.pending
      assert.strictEqual(pending.length, all.length - firstRun, "everything not delivered is still pending")
      const bob0 = pending.find((e) => e.message.to === "bob" && e.message.body === 0)
      assert.strictEqual(bob0?.attempts, 1, "the failed attempt was recorded")
      assert.strictEqual(bob0?.lastError, "bob is offline")
      const q2 = yield* DeliveryQueue.make({ log: log2, deliver: (e) => record(e, 2) })
      yield* q2.idle
      assert.isFalse(delivered.some((d) => d.to === "bob" && d.run === 2), "bob waits for his head's nextAttemptAt")
      yield* TestClock.adjust(10_000)
      yield* q2.idle

      // ---- everything delivered exactly once, in seq order per recipient ----
      assert.deepStrictEqual(delivered.map((d) => d.id).sort(), all.map((e) => e.id).sort())
      for (const to of RECIPIENTS) {
        const seqs = delivered.filter((d) => d.to === to).map((d) => d.seq)
        assert.deepStrictEqual(seqs, all.filter((e) => e.message.to === to).map((e) => e.seq), `order for ${to}`)
      }
      assert.deepStrictEqual(yield* log2.pending, [])
      assert.deepStrictEqual(yield* q2.stats, { pending: 0, dead: 0, inFlight: 0, delivered: all.length - firstRun })
    }))
})
