/**
 * `DeliveryLog.appendAndMark`: an append and its entry's attempt-started mark in one commit (the file
 * log stages the mark right after the append), and the queue's use of it: a recipient's first message,
 * when a slot is free for it, costs one sync before `deliver` instead of two; every entry is still
 * marked durably before `deliver` sees it.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option } from "effect"
import { TestClock } from "effect/testing"
import * as fs from "node:fs"
import { join } from "node:path"
import { DeliveryFailure, DeliveryLog, DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryEntry, DeliveryLog as Log } from "../../src/delivery/types.js"
import { recordBoundaries, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-append-and-mark")
afterAll(tmp.rm)

const msg = (to: string, body: unknown, idempotencyKey?: string) =>
  idempotencyKey === undefined ? { channel: "c", to, body } : { channel: "c", to, body, idempotencyKey }
const segment = (dir: string) => join(dir, fs.readdirSync(dir).filter((f) => f.endsWith(".log")).sort()[0]!)

/** `file` with every call the queue makes recorded (`append`, `appendAndMark`, `mark`, `ack`, `ackAndMark`). */
const recorded = (file: Log) => {
  const calls: Array<string> = []
  const log: Log = {
    ...file,
    append: (m) => Effect.suspend(() => (calls.push(`append ${String(m.to)}`), file.append(m))),
    appendAndMark: (m) => Effect.suspend(() => (calls.push(`appendAndMark ${String(m.to)}`), file.appendAndMark!(m))),
    markStarted: (id) => Effect.suspend(() => (calls.push(`mark ${id}`), file.markStarted!(id))),
    ack: (id) => Effect.suspend(() => (calls.push(`ack ${id}`), file.ack(id))),
    ackAndMark: (id, next) => Effect.suspend(() => (calls.push(`ack ${id} mark ${next}`), file.ackAndMark!(id, next)))
  }
  return { log, calls }
}

/** Whether `entry` reads `maybeSent` in the log now (its mark is durable: `get` lists committed state). */
const markedNow = (file: Log, entry: DeliveryEntry) =>
  Effect.map(file.get(entry.id), (e) => Option.getOrThrow(e).maybeSent === true)

describe("DeliveryLog.appendAndMark (file log)", () => {
  it.effect("appends and marks in one commit: two records, the append first; a re-open reads maybeSent", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const entry = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir })
          const [entry, marked] = yield* log.appendAndMark!(msg("r", 1))
          assert.isTrue(marked)
          assert.isUndefined(entry.maybeSent, "the entry as appended, before its attempt")
          assert.isTrue(Option.getOrThrow(yield* log.get(entry.id)).maybeSent, "marked")
          return entry
        })
      )
      assert.strictEqual(recordBoundaries(segment(dir)).length - 1, 2)
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir })
          assert.deepStrictEqual((yield* log.pending).map((e) => [e.id, e.maybeSent]), [[entry.id, true]])
        })
      )
    }))

  it.effect("an idempotency key's existing entry is returned unmarked, nothing written; errors as append's", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir })
          const first = yield* log.append(msg("r", 1, "k"))
          const [again, marked] = yield* log.appendAndMark!(msg("r", 1, "k"))
          assert.strictEqual(again.id, first.id)
          assert.isFalse(marked)
          assert.isUndefined(Option.getOrThrow(yield* log.get(first.id)).maybeSent)
          const refused = yield* Effect.flip(log.appendAndMark!({ channel: "c", to: "r", body: undefined }))
          assert.strictEqual(refused.reason, "invalid")
        })
      )
      assert.strictEqual(recordBoundaries(segment(dir)).length - 1, 1, "only the first append")
    }))
})

describe("DeliveryQueue on a log with appendAndMark", () => {
  it.effect("a message on its own: appended with its mark, then acked (no separate mark); a second one behind it goes as before", () =>
    Effect.gen(function*() {
      const file = yield* DeliveryLog.open({ dir: tmp.next() })
      const { calls, log } = recorded(file)
      const gate = yield* Deferred.make<void>()
      const inside = yield* Deferred.make<void>()
      const seen: Array<[unknown, boolean]> = []
      const q = yield* DeliveryQueue.make({
        log,
        deliver: (entry) =>
          Effect.gen(function*() {
            seen.push([entry.message.body, yield* markedNow(file, entry)])
            if (entry.message.body === 1) {
              yield* Deferred.succeed(inside, undefined).pipe(Effect.andThen(Deferred.await(gate)))
            }
          })
      })
      const a = yield* q.enqueue(msg("r", 1))
      // Wait until the first one is inside deliver, then add a second for the same recipient.
      yield* Deferred.await(inside)
      const b = yield* q.enqueue(msg("r", 2))
      yield* Deferred.succeed(gate, undefined)
      yield* q.idle
      assert.deepStrictEqual(seen, [[1, true], [2, true]], "each entry marked before deliver saw it")
      assert.deepStrictEqual(calls, [`appendAndMark r`, `append r`, `ack ${a.id} mark ${b.id}`, `ack ${b.id}`])
      assert.strictEqual((yield* file.pending).length, 0)
    }).pipe(Effect.scoped))

  it.effect("a burst takes the fused call for as many recipients as there are free slots, the rest mark at their attempt", () =>
    Effect.gen(function*() {
      const file = yield* DeliveryLog.open({ dir: tmp.next(), fsync: "never" })
      const { calls, log } = recorded(file)
      const gate = yield* Deferred.make<void>()
      const unmarkedAtDeliver: Array<string> = []
      const q = yield* DeliveryQueue.make({
        log,
        concurrency: 2,
        deliver: (entry) =>
          Effect.gen(function*() {
            if (!(yield* markedNow(file, entry))) unmarkedAtDeliver.push(String(entry.message.to))
            yield* Deferred.await(gate)
          })
      })
      const recipients = ["a", "b", "c", "d", "e", "f"]
      const sends = yield* Effect.forkChild(
        Effect.forEach(recipients, (to) => q.enqueue(msg(to, to)), { concurrency: "unbounded" })
      )
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(sends)
      yield* q.idle
      const fused = calls.filter((c) => c.startsWith("appendAndMark"))
      const plain = calls.filter((c) => c.startsWith("append "))
      assert.strictEqual(fused.length, 2, `one fused call per free slot: ${calls.join(", ")}`)
      assert.strictEqual(plain.length, 4)
      assert.strictEqual(calls.filter((c) => c.startsWith("mark ")).length, 4, "the others are marked at their attempt")
      assert.deepStrictEqual(unmarkedAtDeliver, [])
      assert.strictEqual((yield* file.pending).length, 0)
    }).pipe(Effect.scoped))

  it.effect("two messages for one recipient appended at once: only the first is marked at its append", () =>
    Effect.gen(function*() {
      const file = yield* DeliveryLog.open({ dir: tmp.next(), fsync: "never" })
      const { calls, log } = recorded(file)
      const q = yield* DeliveryQueue.make({ log, deliver: () => Effect.void })
      const [a, b] = yield* Effect.forEach([1, 2], (i) => q.enqueue(msg("r", i)), { concurrency: "unbounded" })
      yield* q.idle
      // The second waits behind the first: a mark at its append could read maybeSent after a crash, never attempted.
      assert.deepStrictEqual(calls, [`appendAndMark r`, `append r`, `ack ${a!.id} mark ${b!.id}`, `ack ${b!.id}`])
    }).pipe(Effect.scoped))

  it.effect("a log without appendAndMark (or without markStarted) appends as before", () =>
    Effect.gen(function*() {
      const file = yield* DeliveryLog.open({ dir: tmp.next(), fsync: "never" })
      const { calls, log } = recorded(file)
      const { appendAndMark: _fused, ...plainLog } = log
      const q = yield* DeliveryQueue.make({ log: plainLog, deliver: () => Effect.void })
      const a = yield* q.enqueue(msg("r", 1))
      yield* q.idle
      const { markStarted: _mark, ...unmarked } = log
      const q2 = yield* DeliveryQueue.make({ log: unmarked, deliver: () => Effect.void })
      const b = yield* q2.enqueue(msg("s", 2))
      yield* q2.idle
      assert.deepStrictEqual(calls, [`append r`, `mark ${a.id}`, `ack ${a.id}`, `append s`, `ack ${b.id}`])
    }).pipe(Effect.scoped))

  it.effect("a keyed message appended with its mark reaches deliver without maybeSent, at its first attempt and its retry (only a crash's mark reads maybeSent)", () =>
    Effect.gen(function*() {
      const file = yield* DeliveryLog.open({ dir: tmp.next(), fsync: "never" })
      const { calls, log } = recorded(file)
      const seen: Array<[number, boolean | undefined, boolean]> = []
      const failed = yield* Deferred.make<void>()
      const q = yield* DeliveryQueue.make({
        log,
        backoffMs: [1_000],
        jitter: 0,
        deliver: (entry) =>
          Effect.gen(function*() {
            seen.push([entry.attempts, entry.maybeSent, yield* markedNow(file, entry)])
            if (entry.attempts === 0) {
              yield* Deferred.succeed(failed, undefined)
              return yield* new DeliveryFailure({ message: "429", status: 429 })
            }
          })
      })
      const a = yield* q.enqueue(msg("r", "hi", "reply:s:1"))
      yield* Deferred.await(failed)
      yield* TestClock.adjust(1_000)
      yield* q.idle
      // Each attempt had its durable mark (read back, the log says so), and neither was told it may have gone out.
      assert.deepStrictEqual(seen, [[0, undefined, true], [1, undefined, true]])
      assert.deepStrictEqual(calls.slice(0, 1), ["appendAndMark r"])
      assert.deepStrictEqual(calls.slice(-1), [`ack ${a.id}`])
    }).pipe(Effect.scoped))
})
