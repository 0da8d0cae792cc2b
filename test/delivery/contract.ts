/**
 * The store-independent contract of `DeliveryLog` (spec: delivery.md). Every store (the file log,
 * later Postgres) calls `deliveryLogContract` from its own test file. Nothing here knows about files.
 *
 * Assumes the store's defaults: `dedupeWindowMs` 24 h and a record limit of about 1 MiB. Time is the
 * TestClock (`it.effect`), so the store must read time through Effect's `Clock`.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Option, Result, Scope } from "effect"
import { TestClock } from "effect/testing"
import type { DeliveryLogError } from "../../src/delivery/errors.js"
import type { DeliveryLog, OutboundMessage } from "../../src/delivery/types.js"

/** Opens a store. */
export type MakeLog = () => Effect.Effect<DeliveryLog, DeliveryLogError, Scope.Scope>

const msg = (to: string, body: unknown, extra: Partial<OutboundMessage> = {}): OutboundMessage => ({
  channel: "test",
  to,
  body,
  ...extra
})

/** The failure of `self`, which must fail. */
const failure = <A>(self: Effect.Effect<A, DeliveryLogError>) =>
  Effect.gen(function*() {
    const r = yield* Effect.result(self)
    if (Result.isSuccess(r)) return assert.fail("expected a DeliveryLogError, got success")
    return r.failure
  })

const expectReason = <A>(self: Effect.Effect<A, DeliveryLogError>, reason: DeliveryLogError["reason"]) =>
  Effect.gen(function*() {
    const e = yield* failure(self)
    assert.strictEqual(e._tag, "DeliveryLogError")
    assert.strictEqual(e.reason, reason, e.message)
    assert.isAbove(e.message.length, 10, "the message says what to change")
    return e
  })

/**
 * Register the contract tests for a store. `makeLog` opens a fresh, empty store each call.
 * `makeReopenable`, when given, returns an opener bound to one fresh store: calling the opener again
 * (after the previous scope closed) re-opens the same store, for the "reopen keeps state" tests.
 */
export const deliveryLogContract = (name: string, makeLog: MakeLog, makeReopenable?: () => MakeLog): void => {
  describe(`DeliveryLog contract: ${name}`, () => {
    it.effect("append returns a pending entry (attempts 0, enqueuedAt now) that get finds", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(1_000_000)
        const log = yield* makeLog()
        const e = yield* log.append(msg("alice", { text: "hi" }))
        assert.strictEqual(e.status, "pending")
        assert.strictEqual(e.attempts, 0)
        assert.strictEqual(e.enqueuedAt, 1_000_000)
        assert.deepStrictEqual(e.message, { channel: "test", to: "alice", body: { text: "hi" } })
        assert.isAbove(e.id.length, 0)
        assert.deepStrictEqual(yield* log.get(e.id), Option.some(e))
        assert.isTrue(Option.isNone(yield* log.get("no-such-id")))
      }))

    it.effect("seq increases with every append and pending lists oldest first", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const a = yield* log.append(msg("a", 1))
        const b = yield* log.append(msg("b", 2))
        const c = yield* log.append(msg("a", 3))
        assert.isBelow(a.seq, b.seq)
        assert.isBelow(b.seq, c.seq)
        assert.deepStrictEqual((yield* log.pending).map((e) => e.id), [a.id, b.id, c.id])
      }))

    it.effect("concurrent appends get distinct ids and distinct seqs, all pending in seq order", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const entries = yield* Effect.forEach(
          Array.from({ length: 50 }, (_, i) => i),
          (i) => log.append(msg(`r${i % 5}`, { i })),
          {
            concurrency: "unbounded"
          }
        )
        assert.strictEqual(new Set(entries.map((e) => e.id)).size, 50)
        assert.strictEqual(new Set(entries.map((e) => e.seq)).size, 50)
        const seqs = (yield* log.pending).map((e) => e.seq)
        assert.strictEqual(seqs.length, 50)
        assert.deepStrictEqual(seqs, [...seqs].sort((x, y) => x - y))
      }))

    it.effect("attempt records attempts + 1, lastError and nextAttemptAt", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const e = yield* log.append(msg("a", 1))
        const one = yield* log.attempt(e.id, { error: "timeout", nextAttemptAt: 5_000 })
        assert.strictEqual(one.attempts, 1)
        assert.strictEqual(one.lastError, "timeout")
        assert.strictEqual(one.nextAttemptAt, 5_000)
        const two = yield* log.attempt(e.id, { error: "refused", nextAttemptAt: 9_000 })
        assert.strictEqual(two.attempts, 2)
        assert.deepStrictEqual(yield* log.get(e.id), Option.some(two))
        assert.strictEqual((yield* log.pending)[0]!.attempts, 2)
      }))

    it.effect("ack removes the entry; acking it again succeeds (idempotent)", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const e = yield* log.append(msg("a", 1))
        const f = yield* log.append(msg("a", 2))
        yield* log.ack(e.id)
        assert.isTrue(Option.isNone(yield* log.get(e.id)))
        assert.deepStrictEqual((yield* log.pending).map((x) => x.id), [f.id])
        yield* log.ack(e.id)
        assert.strictEqual((yield* log.stats).pending, 1)
      }))

    it.effect("unknown-id: ack, attempt, deadLetter and requeue of an id never appended", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        yield* expectReason(log.ack("nope"), "unknown-id")
        yield* expectReason(log.attempt("nope", { error: "x", nextAttemptAt: 1 }), "unknown-id")
        yield* expectReason(log.deadLetter("nope", "x"), "unknown-id")
        yield* expectReason(log.requeue("nope"), "unknown-id")
      }))

    it.effect("deadLetter moves an entry to dead; requeue brings it back pending with attempts 0", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const e = yield* log.append(msg("a", 1))
        yield* log.attempt(e.id, { error: "boom", nextAttemptAt: 100 })
        yield* log.deadLetter(e.id, "permanent: no such user")
        const dead = yield* log.dead
        assert.strictEqual(dead.length, 1)
        assert.strictEqual(dead[0]!.status, "dead")
        assert.strictEqual(dead[0]!.lastError, "permanent: no such user")
        assert.deepStrictEqual(yield* log.pending, [])
        assert.deepStrictEqual(
          { pending: (yield* log.stats).pending, dead: (yield* log.stats).dead },
          { pending: 0, dead: 1 }
        )
        yield* log.requeue(e.id)
        const back = (yield* log.pending)[0]!
        assert.strictEqual(back.id, e.id)
        assert.strictEqual(back.status, "pending")
        assert.strictEqual(back.attempts, 0)
        assert.deepStrictEqual(yield* log.dead, [])
      }))

    it.effect("finishing is one record: attempt with dead moves the entry to dead in one call; ack of a dead entry fails not-pending and leaves it", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const e = yield* log.append(msg("a", 1))
        const last = yield* log.attempt(e.id, { error: "boom", nextAttemptAt: 100, dead: true })
        assert.deepStrictEqual([last.status, last.attempts, last.lastError], ["dead", 1, "boom"])
        yield* expectReason(log.ack(e.id), "not-pending")
        assert.deepStrictEqual((yield* log.dead).map((x) => [x.id, x.status, x.attempts]), [[e.id, "dead", 1]])
        assert.deepStrictEqual(yield* log.pending, [])
      }))

    it.effect("an attempt of a dead entry fails not-pending and leaves it as it was", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const e = yield* log.append(msg("a", 1))
        yield* log.deadLetter(e.id, "gone")
        const before = (yield* log.get(e.id)).pipe(Option.getOrThrow)
        yield* expectReason(log.attempt(e.id, { error: "late", nextAttemptAt: 1 }), "not-pending")
        yield* expectReason(log.attempt(e.id, { error: "late", nextAttemptAt: 1, dead: true }), "not-pending")
        const after = (yield* log.get(e.id)).pipe(Option.getOrThrow)
        assert.deepStrictEqual(
          [after.status, after.attempts, after.lastError],
          [before.status, before.attempts, before.lastError]
        )
      }))

    it.effect("idempotency: a key of a pending or dead entry returns that entry and adds nothing", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const e = yield* log.append(msg("a", 1, { idempotencyKey: "k1" }))
        const again = yield* log.append(msg("a", "different body", { idempotencyKey: "k1" }))
        assert.strictEqual(again.id, e.id)
        assert.strictEqual((yield* log.pending).length, 1)
        yield* log.deadLetter(e.id, "gone")
        const third = yield* log.append(msg("a", 1, { idempotencyKey: "k1" }))
        assert.strictEqual(third.id, e.id)
        assert.strictEqual(third.status, "dead")
        assert.deepStrictEqual({ p: (yield* log.pending).length, d: (yield* log.dead).length }, { p: 0, d: 1 })
        const other = yield* log.append(msg("a", 1, { idempotencyKey: "k2" }))
        assert.notStrictEqual(other.id, e.id)
      }))

    it.effect("idempotency: a key acked within dedupeWindowMs (24 h) returns the entry; after the window it appends anew", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const e = yield* log.append(msg("a", 1, { idempotencyKey: "once" }))
        yield* log.ack(e.id)
        yield* TestClock.adjust(24 * 60 * 60 * 1000 - 1)
        const same = yield* log.append(msg("a", 1, { idempotencyKey: "once" }))
        assert.strictEqual(same.id, e.id)
        assert.deepStrictEqual(yield* log.pending, [], "an acked entry does not come back")
        yield* TestClock.adjust(1)
        const fresh = yield* log.append(msg("a", 1, { idempotencyKey: "once" }))
        assert.notStrictEqual(fresh.id, e.id)
        assert.deepStrictEqual((yield* log.pending).map((x) => x.id), [fresh.id])
      }))

    it.effect("ack of an acked entry succeeds within dedupeWindowMs (24 h); past it (and a compaction) the id is forgotten: unknown-id", () =>
      Effect.gen(function*() {
        yield* TestClock.setTime(1_000_000)
        const log = yield* makeLog()
        const e = yield* log.append(msg("a", 1))
        yield* log.ack(e.id)
        yield* log.ack(e.id)
        yield* TestClock.adjust(24 * 60 * 60 * 1000 - 1)
        yield* log.compact
        yield* log.ack(e.id)
        assert.deepStrictEqual(yield* log.pending, [], "an acked entry does not come back")
        yield* TestClock.adjust(1)
        yield* log.compact
        // Ids are random: one acked before the window cannot be told from one never appended.
        const forgotten = yield* expectReason(log.ack(e.id), "unknown-id")
        assert.include(forgotten.message, e.id)
        assert.deepStrictEqual(yield* log.pending, [])
      }))

    it.effect("bad input: empty channel or to is invalid and nothing is written", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const e1 = yield* expectReason(log.append({ channel: "", to: "a", body: 1 }), "invalid")
        assert.include(e1.message, "channel")
        const e2 = yield* expectReason(log.append({ channel: "c", to: "", body: 1 }), "invalid")
        assert.include(e2.message, "to")
        assert.deepStrictEqual(yield* log.pending, [])
        assert.strictEqual((yield* log.stats).pending, 0)
      }))

    it.effect("bad input: a body that is not JSON (cycle, BigInt, function, undefined) is invalid and nothing is written", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const cyclic: Record<string, unknown> = { a: 1 }
        cyclic.self = cyclic
        for (const body of [cyclic, { n: 10n }, { f: () => 1 }, undefined, { u: undefined }, [Number.NaN]]) {
          const e = yield* expectReason(log.append(msg("a", body)), "invalid")
          assert.include(e.message, "body")
        }
        assert.deepStrictEqual(yield* log.pending, [])
      }))

    it.effect("bad input: a message over the record limit is too-large and nothing is written", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const e = yield* expectReason(log.append(msg("a", "x".repeat(2 * 1024 * 1024))), "too-large")
        assert.include(e.message, "maxRecordBytes")
        assert.deepStrictEqual(yield* log.pending, [])
        const ok = yield* log.append(msg("a", "small"))
        assert.deepStrictEqual((yield* log.pending).map((x) => x.id), [ok.id])
      }))

    it.effect("closed: every call after the Scope closed fails with reason closed", () =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const log = yield* Scope.provide(scope)(makeLog())
        const e = yield* log.append(msg("a", 1))
        yield* Scope.close(scope, Exit.void)
        yield* expectReason(log.append(msg("a", 2)), "closed")
        yield* expectReason(log.ack(e.id), "closed")
        yield* expectReason(log.attempt(e.id, { error: "x", nextAttemptAt: 1 }), "closed")
        yield* expectReason(log.deadLetter(e.id, "x"), "closed")
        yield* expectReason(log.requeue(e.id), "closed")
        yield* expectReason(log.flush, "closed")
        yield* expectReason(log.compact, "closed")
      }))

    it.effect("stats count pending and dead; flush succeeds", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const a = yield* log.append(msg("a", 1))
        yield* log.append(msg("b", 2))
        yield* log.deadLetter(a.id, "x")
        yield* log.flush
        const s = yield* log.stats
        assert.strictEqual(s.pending, 1)
        assert.strictEqual(s.dead, 1)
      }))

    it.effect("compact keeps pending, dead, attempts and acked keys in their window", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const a = yield* log.append(msg("a", 1, { idempotencyKey: "ka" }))
        const b = yield* log.append(msg("b", 2))
        const c = yield* log.append(msg("c", 3))
        yield* log.attempt(b.id, { error: "e", nextAttemptAt: 7 })
        yield* log.deadLetter(c.id, "dead")
        yield* log.ack(a.id)
        const before = { p: yield* log.pending, d: yield* log.dead }
        yield* log.compact
        yield* log.compact
        assert.deepStrictEqual({ p: yield* log.pending, d: yield* log.dead }, before)
        assert.strictEqual((yield* log.append(msg("a", 1, { idempotencyKey: "ka" }))).id, a.id)
        yield* log.ack(a.id)
      }))

    it.effect("markStarted: the entry reads maybeSent until an outcome (attempt, requeue) is recorded", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const markStarted = log.markStarted
        assert.isDefined(markStarted, "the store writes the attempt-started mark")
        const a = yield* log.append(msg("a", 1))
        const b = yield* log.append(msg("b", 2))
        assert.isUndefined(a.maybeSent)
        yield* markStarted!(a.id)
        yield* markStarted!(a.id) // twice: still one mark, no error
        assert.isTrue(Option.getOrThrow(yield* log.get(a.id)).maybeSent)
        assert.isUndefined(Option.getOrThrow(yield* log.get(b.id)).maybeSent)
        assert.deepStrictEqual((yield* log.pending).map((e) => e.maybeSent === true), [true, false])
        const attempted = yield* log.attempt(a.id, { error: "down", nextAttemptAt: 5 })
        assert.isUndefined(attempted.maybeSent, "an outcome clears it")
        assert.isUndefined(Option.getOrThrow(yield* log.get(a.id)).maybeSent)
        yield* markStarted!(b.id)
        yield* log.attempt(b.id, { error: "gone", nextAttemptAt: 0, dead: true })
        yield* expectReason(markStarted!(b.id), "not-pending")
        yield* log.requeue(b.id)
        assert.isUndefined(Option.getOrThrow(yield* log.get(b.id)).maybeSent)
        yield* markStarted!(b.id)
        yield* log.ack(b.id)
        assert.isTrue(Option.isNone(yield* log.get(b.id)))
        yield* expectReason(markStarted!("no-such-id"), "unknown-id")
      }))

    it.effect("markStarted: concurrent marks all succeed; compact keeps maybeSent", () =>
      Effect.gen(function*() {
        const log = yield* makeLog()
        const entries = yield* Effect.forEach(Array.from({ length: 20 }, (_, i) => msg(`r${i}`, i)), log.append, {
          concurrency: "unbounded"
        })
        const chosen = new Set(entries.filter((_, i) => i % 2 === 0).map((e) => e.id))
        yield* Effect.forEach(chosen, (id) => log.markStarted!(id), { concurrency: "unbounded" })
        const marked = (yield* log.pending).map((e) => [e.id, e.maybeSent === true])
        assert.deepStrictEqual(marked, (yield* log.pending).map((e) => [e.id, chosen.has(e.id)]))
        assert.strictEqual(marked.filter(([, m]) => m).length, 10)
        yield* log.compact
        assert.deepStrictEqual((yield* log.pending).map((e) => [e.id, e.maybeSent === true]), marked)
      }))

    if (makeReopenable !== undefined) {
      it.effect("reopen keeps pending (with attempts), dead, seq order; acked stays gone; keys still dedupe", () =>
        Effect.gen(function*() {
          const open = makeReopenable()
          const ids = yield* Effect.scoped(
            Effect.gen(function*() {
              const log = yield* open()
              const a = yield* log.append(msg("a", { n: 1 }, { idempotencyKey: "ka" }))
              const b = yield* log.append(msg("b", { n: 2 }))
              const c = yield* log.append(msg("c", { n: 3 }, { idempotencyKey: "kc" }))
              const d = yield* log.append(msg("d", { n: 4 }))
              yield* log.attempt(b.id, { error: "e1", nextAttemptAt: 42 })
              yield* log.deadLetter(c.id, "bad")
              yield* log.ack(a.id)
              return { a, b, c, d, pending: yield* log.pending, dead: yield* log.dead }
            })
          )
          const log = yield* open()
          assert.deepStrictEqual(yield* log.pending, ids.pending)
          assert.deepStrictEqual(yield* log.dead, ids.dead)
          assert.isTrue(Option.isNone(yield* log.get(ids.a.id)))
          assert.strictEqual((yield* log.append(msg("a", 0, { idempotencyKey: "ka" }))).id, ids.a.id)
          assert.strictEqual((yield* log.append(msg("c", 0, { idempotencyKey: "kc" }))).id, ids.c.id)
          yield* log.ack(ids.a.id)
          const e = yield* log.append(msg("e", 5))
          assert.isAbove(e.seq, ids.d.seq, "seq is never reused")
        }))

      it.effect("reopen: an entry marked started without an outcome comes back maybeSent (also through compact)", () =>
        Effect.gen(function*() {
          const open = makeReopenable()
          const ids = yield* Effect.scoped(
            Effect.gen(function*() {
              const log = yield* open()
              const a = yield* log.append(msg("a", 1))
              const b = yield* log.append(msg("b", 2))
              const c = yield* log.append(msg("c", 3))
              yield* log.markStarted!(a.id)
              yield* log.markStarted!(b.id)
              yield* log.attempt(b.id, { error: "e", nextAttemptAt: 9 })
              yield* log.markStarted!(c.id)
              yield* log.compact
              yield* log.ack(c.id)
              return { a, b }
            })
          )
          const log = yield* open()
          const pending = yield* log.pending
          assert.deepStrictEqual(pending.map((e) => [e.id, e.maybeSent === true]), [[ids.a.id, true], [
            ids.b.id,
            false
          ]])
          yield* log.attempt(ids.a.id, { error: "after restart", nextAttemptAt: 1 })
          assert.isUndefined(Option.getOrThrow(yield* log.get(ids.a.id)).maybeSent)
        }))

      it.effect("reopen after compact keeps the same state and seq keeps increasing", () =>
        Effect.gen(function*() {
          const open = makeReopenable()
          const before = yield* Effect.scoped(
            Effect.gen(function*() {
              const log = yield* open()
              const all = []
              for (let i = 0; i < 20; i++) all.push(yield* log.append(msg(`r${i % 3}`, { i })))
              for (let i = 0; i < 20; i += 2) yield* log.ack(all[i]!.id)
              yield* log.deadLetter(all[1]!.id, "x")
              yield* log.compact
              const last = yield* log.append(msg("z", "after"))
              return { pending: yield* log.pending, dead: yield* log.dead, last }
            })
          )
          const log = yield* open()
          assert.deepStrictEqual(yield* log.pending, before.pending)
          assert.deepStrictEqual(yield* log.dead, before.dead)
          const next = yield* log.append(msg("z", "later"))
          assert.isAbove(next.seq, before.last.seq)
        }))
    }
  })
}
