/**
 * Finishing is one record: the last failed attempt and the move to dead are one `attempt` record with
 * `dead: true`; replay dead-letters entries past the queue's maxAttempts; `ack` of a dead entry fails
 * `not-pending` and leaves it (file log and memory log alike).
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { TestClock } from "effect/testing"
import * as fs from "node:fs"
import { join } from "node:path"
import { DeliveryFailure, DeliveryLog, DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryLog as Log } from "../../src/delivery/types.js"
import { failure, recordBoundaries, tempRoot } from "./fixtures/files.js"
import { makeMemoryLog } from "./memoryLog.js"

const tmp = tempRoot("log-finish")
afterAll(tmp.rm)

const msg = { channel: "c", to: "r", body: "hi" }
const segmentFiles = (dir: string) => fs.readdirSync(dir).filter((f) => f.endsWith(".log")).sort()

const ackOfDead = (log: Log) =>
  Effect.gen(function*() {
    const e = yield* log.append(msg)
    const last = yield* log.attempt(e.id, { error: "boom", nextAttemptAt: 0, dead: true })
    assert.strictEqual(last.status, "dead")
    assert.strictEqual(last.attempts, 1)
    assert.strictEqual(last.lastError, "boom")
    const err = yield* failure(log.ack(e.id))
    assert.strictEqual(err.reason, "not-pending")
    assert.include(err.message, e.id)
    const kept = yield* log.get(e.id)
    assert.isTrue(Option.isSome(kept) && kept.value.status === "dead", "the dead entry stays")
    assert.deepStrictEqual((yield* log.dead).map((x) => x.id), [e.id])
    return e
  })

describe("finishing is one record", () => {
  it.effect("memory log: ack of a dead entry fails not-pending and leaves it", () =>
    Effect.asVoid(ackOfDead(makeMemoryLog())))

  it.effect("file log: the final attempt is one record; ack of a dead entry fails not-pending and writes nothing; a re-open agrees", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const id = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir })
          const e = yield* ackOfDead(log)
          return e.id
        })
      )
      // Two records: the append and the attempt that also moved it to dead.
      const [seg] = segmentFiles(dir)
      assert.strictEqual(recordBoundaries(join(dir, seg!)).length - 1, 2)
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir })
          const dead = yield* log.dead
          assert.deepStrictEqual(dead.map((x) => [x.id, x.attempts, x.lastError]), [[id, 1, "boom"]])
          assert.strictEqual((yield* log.pending).length, 0)
        })
      )
    }))

  it.effect("replay with a lower maxAttempts dead-letters what used them up instead of delivering it", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const ids = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, fsync: "never" })
          const spent = yield* log.append({ ...msg, to: "a" })
          yield* log.attempt(spent.id, { error: "e1", nextAttemptAt: 0 })
          yield* log.attempt(spent.id, { error: "e2", nextAttemptAt: 0 })
          const fresh = yield* log.append({ ...msg, to: "a" })
          return { spent: spent.id, fresh: fresh.id }
        })
      )
      const delivered: Array<string> = []
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, fsync: "never" })
          const q = yield* DeliveryQueue.make({
            log,
            maxAttempts: 2,
            deliver: (e) => Effect.sync(() => void delivered.push(e.id))
          })
          yield* TestClock.adjust(0)
          yield* q.idle
          assert.deepStrictEqual(delivered, [ids.fresh], "the entry that used maxAttempts is not delivered again")
          const dead = yield* log.dead
          assert.deepStrictEqual(dead.map((e) => e.id), [ids.spent])
          assert.include(dead[0]!.lastError!, "maxAttempts (2)")
          assert.include(dead[0]!.lastError!, "e2")
        })
      )
    }))

  it.effect("the queue's final failed attempt writes one attempt record with dead, no separate dead-letter", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const q = yield* DeliveryQueue.make({
        log,
        maxAttempts: 1,
        deliver: () => Effect.fail(new DeliveryFailure({ message: "nope" }))
      })
      const e = yield* q.enqueue(msg)
      yield* q.idle
      const ops = log.calls.filter((c) => "id" in c && (c.id === e.id || c.op === "append")).map((c) => c.op)
      assert.deepStrictEqual(
        ops,
        ["append", "markStarted", "attempt"],
        "the mark, then one record: no separate dead-letter"
      )
      assert.deepStrictEqual((yield* log.dead).map((x) => x.id), [e.id])
    }))
})
