/**
 * An entry dead-lettered through the log (by an operator, another tool) while the queue's attempt of
 * it runs: the queue's ack or attempt record then fails `not-pending`. The queue drops the entry from
 * memory (the log keeps it dead) and goes on with the recipient's next entry, instead of retrying a
 * call that can never succeed and holding the recipient forever. On the real file log.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DeliveryFailure, DeliveryLog, DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"

const root = mkdtempSync(join(tmpdir(), "switchyard-dead-meanwhile-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const within = <A, E>(self: Effect.Effect<A, E>, what: string) =>
  Effect.timeoutOrElse(self, {
    duration: "20 seconds",
    orElse: () => Effect.die(new Error(`${what}: not within 20 s`))
  })

const scenario = (outcome: "delivered" | "failed") =>
  Effect.gen(function*() {
    const log = yield* DeliveryLog.open({ dir: join(root, outcome), fsync: "never" })
    const reached = yield* Deferred.make<void>()
    const gate = yield* Deferred.make<void>()
    const nextDelivered = yield* Deferred.make<DeliveryEntry>()
    const deliver = (entry: DeliveryEntry) =>
      entry.message.body === 0
        ? Deferred.succeed(reached, undefined).pipe(
          Effect.andThen(Deferred.await(gate)),
          Effect.andThen(outcome === "delivered" ? Effect.void : Effect.fail(new DeliveryFailure({ message: "down" })))
        )
        : Deferred.succeed(nextDelivered, entry).pipe(Effect.asVoid)
    const queue = yield* DeliveryQueue.make({ log, deliver, backoffMs: [60_000], jitter: 0 })
    const first = yield* queue.enqueue({ channel: "test", to: "alice", body: 0 })
    const second = yield* queue.enqueue({ channel: "test", to: "alice", body: 1 })
    yield* within(Deferred.await(reached), "the first attempt started")
    yield* log.deadLetter(first.id, "stopped by the operator")
    yield* Deferred.succeed(gate, undefined)
    const next = yield* within(Deferred.await(nextDelivered), "the recipient's next entry delivered")
    assert.strictEqual(next.id, second.id)
    yield* within(queue.idle, "the queue idle")
    const dead = yield* log.dead
    assert.deepStrictEqual(dead.map((e) => [e.id, e.lastError, e.attempts]), [[first.id, "stopped by the operator", 0]])
    assert.deepStrictEqual(yield* log.pending, [])
    const stats = yield* queue.stats
    assert.deepStrictEqual([stats.inFlight, stats.pending, stats.dead], [0, 0, 1])
  })

describe("DeliveryQueue: an entry dead-lettered in the log while its attempt runs", () => {
  it.live("delivered meanwhile: the ack fails not-pending, the entry stays dead, the recipient goes on", () =>
    Effect.scoped(scenario("delivered")))
  it.live("failed meanwhile: the attempt record fails not-pending, the entry stays dead, the recipient goes on", () =>
    Effect.scoped(scenario("failed")))
})
