/**
 * `DeliveryLog.ackAndMark`: the ack of a delivered entry and the attempt-started mark of its
 * recipient's next entry in one call (the file log stages both records at once, the ack first), and
 * the queue's use of it: every entry is marked durably before `deliver` sees it, with one log call a
 * delivery instead of an ack and a mark side by side.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import * as fs from "node:fs"
import { join } from "node:path"
import { DeliveryLog, DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryLog as Log } from "../../src/delivery/types.js"
import { failure, recordBoundaries, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-ack-and-mark")
afterAll(tmp.rm)

const msg = (to: string, body: unknown) => ({ channel: "c", to, body })
const segment = (dir: string) => join(dir, fs.readdirSync(dir).filter((f) => f.endsWith(".log")).sort()[0]!)

describe("DeliveryLog.ackAndMark (file log)", () => {
  it.effect("acks the entry and marks the next one, ack first; a re-open agrees", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const [a, b] = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir })
          const a = yield* log.append(msg("r", 1))
          const b = yield* log.append(msg("r", 2))
          assert.isTrue(yield* log.ackAndMark!(a.id, b.id))
          assert.isTrue(Option.isNone(yield* log.get(a.id)), "acked")
          assert.isTrue(Option.getOrThrow(yield* log.get(b.id)).maybeSent, "marked")
          return [a, b]
        })
      )
      const file = segment(dir)
      // Two appends, the ack, the mark: four records, the ack's id before the mark's.
      assert.strictEqual(recordBoundaries(file).length - 1, 4)
      const bytes = fs.readFileSync(file)
      assert.isBelow(bytes.lastIndexOf(a!.id), bytes.lastIndexOf(b!.id))
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir })
          assert.deepStrictEqual((yield* log.pending).map((e) => [e.id, e.maybeSent]), [[b!.id, true]])
          // Acked within the window: acking it again is idempotent, as `ack` is.
          assert.isTrue(yield* log.ackAndMark!(a!.id, b!.id))
        })
      )
    }))

  it.effect("fails as ack does; a mark that cannot be written is false, the ack still made", () =>
    Effect.gen(function*() {
      const log: Log = yield* DeliveryLog.open({ dir: tmp.next(), fsync: "never" })
      const a = yield* log.append(msg("r", 1))
      const b = yield* log.append(msg("r", 2))
      const dead = yield* log.append(msg("r", 3))
      yield* log.deadLetter(dead.id, "no")
      assert.isFalse(yield* log.ackAndMark!(a.id, dead.id), "a dead entry is not marked")
      assert.isTrue(Option.isNone(yield* log.get(a.id)), "the ack was made")
      assert.isUndefined(Option.getOrThrow(yield* log.get(dead.id)).maybeSent)
      assert.isFalse(yield* log.ackAndMark!(b.id, "no-such-id"), "an unknown next is not marked")
      assert.isTrue(Option.isNone(yield* log.get(b.id)))
      assert.strictEqual((yield* failure(log.ackAndMark!("no-such-id", dead.id))).reason, "unknown-id")
      assert.strictEqual((yield* failure(log.ackAndMark!(dead.id, dead.id))).reason, "not-pending")
      assert.deepStrictEqual((yield* log.dead).map((e) => e.id), [dead.id], "the dead entry stays")
    }).pipe(Effect.scoped))
})

describe("DeliveryQueue on a log with ackAndMark", () => {
  it.effect("one log call a delivery: the first entry's mark alone, then each ack with the next one's mark; every entry marked at deliver", () =>
    Effect.gen(function*() {
      const file = yield* DeliveryLog.open({ dir: tmp.next() })
      const entries = yield* Effect.forEach([1, 2, 3], (i) => file.append(msg("r", i)))
      const other = yield* file.append(msg("s", 4))
      const calls: Array<string> = []
      const log: Log = {
        ...file,
        ack: (id) => Effect.suspend(() => (calls.push(`ack ${id}`), file.ack(id))),
        markStarted: (id) => Effect.suspend(() => (calls.push(`mark ${id}`), file.markStarted!(id))),
        ackAndMark: (id, next) =>
          Effect.suspend(() => (calls.push(`ack ${id} mark ${next}`), file.ackAndMark!(id, next)))
      }
      const markedAtDeliver: Array<[string, boolean | undefined]> = []
      const q = yield* DeliveryQueue.make({
        log,
        concurrency: 1,
        deliver: (entry) =>
          Effect.map(
            file.get(entry.id),
            (now) => void markedAtDeliver.push([entry.id, Option.getOrThrow(now).maybeSent])
          )
      })
      yield* q.idle
      const [e1, e2, e3] = entries.map((e) => e.id)
      assert.deepStrictEqual(markedAtDeliver, [[e1, true], [e2, true], [e3, true], [other.id, true]])
      assert.deepStrictEqual(calls, [
        `mark ${e1}`,
        `ack ${e1} mark ${e2}`,
        `ack ${e2} mark ${e3}`,
        `ack ${e3}`,
        `mark ${other.id}`,
        `ack ${other.id}`
      ])
      assert.strictEqual((yield* file.pending).length, 0)
    }).pipe(Effect.scoped))
})
