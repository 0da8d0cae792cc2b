/**
 * The arena of appended entries' texts (src/delivery/textArena.ts) against a model: every entry reads
 * back exactly the text put for it (ASCII or not, whether its chunk was let go or not, and copies
 * made by `clone` too), snapshots write the same bytes, and the chunks held stay within four times
 * the live texts plus the chunk being filled, however the releases are spread. And through the log:
 * more texts than several chunks hold, most acked, read back exact before and after a compaction and
 * a reopen.
 */
import { assert, describe, it } from "@effect/vitest"
import { afterAll } from "@effect/vitest"
import { Effect } from "effect"
import fc from "fast-check"
import { EntryData } from "../../src/delivery/entryData.js"
import { DeliveryLog } from "../../src/delivery/index.js"
import { entryBytes, writeEntry } from "../../src/delivery/payload.js"
import { ARENA_TEXT_MAX, CHUNK_BYTES, TextArena } from "../../src/delivery/textArena.js"
import type { OutboundMessage } from "../../src/delivery/types.js"
import { tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-text-arena")
afterAll(tmp.rm)

const fresh = (i: number): EntryData =>
  new EntryData(`id-${i}`, i, 0, undefined, undefined, 0, undefined, undefined, "pending", true, 100)

/** A message text of about `size` bytes; `wide`: with characters outside ASCII (9 bytes either way). */
const textOf = (i: number, size: number, wide: boolean): string =>
  JSON.stringify({
    channel: "c",
    to: `t${i}`,
    body: (wide ? "é€😀" : "abcdefghi").repeat(Math.max(1, Math.floor(size / 9)))
  })

describe("TextArena", () => {
  it("texts read back exactly; when a chunk starts, the older ones held are within 4x the live texts", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({ size: fc.integer({ min: 1500, max: 9000 }), wide: fc.boolean(), keep: fc.nat(19) }),
          { minLength: 200, maxLength: 900 }
        ),
        (specs) => {
          const arena = new TextArena()
          const live = new Map<EntryData, string>()
          const all: Array<[EntryData, string]> = []
          let liveBytes = 0
          specs.forEach(({ keep, size, wide }, i) => {
            const text = textOf(i, size, wide)
            const bytes = Buffer.from(text)
            const src = Buffer.concat([Buffer.from("xx"), bytes, Buffer.from("yy")])
            const e = fresh(i)
            const started = arena.started
            assert.isTrue(arena.put(src, 2, 2 + bytes.length, !wide, e))
            all.push([e, text])
            live.set(e, text)
            liveBytes += bytes.length
            // Most entries leave soon (as acks do); one in twenty stays for good.
            if (keep !== 0 && i >= 3) {
              const [gone, goneText] = all[i - 3]!
              if (live.delete(gone)) {
                arena.release(gone)
                liveBytes -= Buffer.byteLength(goneText)
              }
            }
            // When a chunk was started, every older chunk still held had at least a quarter of it live.
            if (arena.started !== started) {
              assert.isAtMost(arena.chunks - 1, Math.floor((4 * liveBytes) / (CHUNK_BYTES - ARENA_TEXT_MAX)))
            }
          })
          assert.isAbove(arena.started, 0)
          for (const [e, text] of live) {
            assert.strictEqual(e.text, text)
            assert.strictEqual(e.textLength, Buffer.byteLength(text))
            const c = e.clone()
            assert.strictEqual(c.text, text)
            // A snapshot entry of the copy holds the same bytes as one of a string entry.
            const plain = new EntryData(e.id, e.seq, 0, undefined, text, 0, undefined, undefined, "pending", true, 100)
            const a = Buffer.alloc(entryBytes(c))
            const b = Buffer.alloc(entryBytes(plain))
            assert.strictEqual(writeEntry(a, 0, c), a.length)
            writeEntry(b, 0, plain)
            assert.isTrue(a.equals(b))
          }
        }
      ),
      { numRuns: 40 }
    )
  })

  it("a text past ARENA_TEXT_MAX is refused (the entry keeps a string)", () => {
    const arena = new TextArena()
    const big = Buffer.alloc(ARENA_TEXT_MAX + 1, 0x61)
    const e = fresh(1)
    assert.isFalse(arena.put(big, 0, big.length, true, e))
  })

  it("one long-lived entry per chunk does not hold its chunk: its text becomes a string", () => {
    const arena = new TextArena()
    const text = textOf(0, 1000, false)
    const bytes = Buffer.from(text)
    const kept: Array<EntryData> = []
    for (let i = 0; i < 20 * Math.ceil(CHUNK_BYTES / bytes.length); i++) {
      const e = fresh(i)
      arena.put(bytes, 0, bytes.length, true, e)
      if (i % 300 === 0) kept.push(e)
      else arena.release(e)
    }
    assert.isAtMost(arena.chunks, 2)
    // Those in chunks let go hold their own strings (so they do not keep the chunks in memory).
    const perChunk = Math.floor(CHUNK_BYTES / bytes.length)
    const stringsBelow = perChunk * arena.started
    for (const e of kept) {
      assert.strictEqual(e.text, text)
      if (e.seq < stringsBelow - perChunk) assert.isFalse(e.inArena, `entry ${e.seq}`)
    }
    // The newest text is in the chunk being filled.
    const last = fresh(1 << 20)
    arena.put(bytes, 0, bytes.length, true, last)
    assert.isTrue(last.inArena)
    assert.strictEqual(last.text, text)
  })
})

describe("texts through the log", () => {
  it.effect("more texts than several chunks hold, most acked: pending read back exact, after compact and reopen", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const message = (i: number) => ({
        channel: "telegram",
        to: `chat-${i % 7}`,
        body: { text: `${i % 3 === 0 ? "ünïcode €" : "plain"} ${"x".repeat(300 + (i % 50))}`, i }
      })
      const expected = new Map<string, OutboundMessage>()
      yield* Effect.scoped(Effect.gen(function*() {
        const log = yield* DeliveryLog.open({ dir, fsync: "never" })
        for (let i = 0; i < 4000; i += 100) {
          const entries = yield* Effect.forEach(
            Array.from({ length: 100 }, (_, k) => i + k),
            (n) => log.append(message(n)),
            { concurrency: "unbounded" }
          )
          for (const e of entries) {
            if (e.message.body && (e.message.body as { i: number }).i % 13 === 0) expected.set(e.id, e.message)
            else yield* log.ack(e.id)
          }
        }
        const read = (yield* log.pending).map((e) => [e.id, e.message] as const)
        assert.deepStrictEqual(read, [...expected])
        yield* log.compact
        assert.deepStrictEqual((yield* log.pending).map((e) => [e.id, e.message] as const), [...expected])
      }))
      const reopened = yield* Effect.scoped(
        Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (log) => log.pending)
      )
      assert.deepStrictEqual(reopened.map((e) => [e.id, e.message] as const), [...expected])
    }))
})
