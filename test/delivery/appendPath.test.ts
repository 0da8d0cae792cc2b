/**
 * Pieces of the log's append path checked against what they replace: the table-driven CRC-32 against
 * zlib's, the ids written into the record against `crypto.randomUUID`'s format; and, through the log,
 * hundreds of overlapping appends (more than the in-flight ring's first 64 slots, so it wraps and
 * grows) each getting back its own entry, as the log holds it and as a reopen reads it.
 */
import { assert, describe, it } from "@effect/vitest"
import { afterAll } from "@effect/vitest"
import { Effect } from "effect"
import fc from "fast-check"
import { crc32 } from "node:zlib"
import { crc32Range } from "../../src/delivery/crc32.js"
import { DeliveryLog } from "../../src/delivery/index.js"
import { UUID_CHARS, writeUuid } from "../../src/delivery/uuid.js"
import { parseUuid } from "../../src/delivery/uuidWords.js"
import { tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-append-path")
afterAll(tmp.rm)

const V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

describe("append path", () => {
  it("crc32Range gives zlib.crc32 of the same bytes, at any offset and length", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), fc.nat(40), fc.nat(40), (bytes, pre, post) => {
        const buf = Buffer.alloc(pre + bytes.length + post, 0xa5)
        buf.set(bytes, pre)
        assert.strictEqual(crc32Range(buf, pre, pre + bytes.length), crc32(Buffer.from(bytes)))
      }),
      { numRuns: 500 }
    )
  })

  it("writeUuid writes version-4 UUIDs in randomUUID's format, all different, across pool refills", () => {
    const buf = Buffer.alloc(UUID_CHARS + 4, 0x7e)
    const seen = new Set<string>()
    // 4,096-byte pool, 16 bytes an id: 1,000 ids refill it several times.
    const words = new Uint32Array(4)
    const parsed = new Uint32Array(4)
    for (let i = 0; i < 1000; i++) {
      writeUuid(buf, 2, i % 2 === 0 ? words : undefined)
      const id = buf.toString("latin1", 2, 2 + UUID_CHARS)
      assert.match(id, V4)
      if (i % 2 === 0) {
        assert.isTrue(parseUuid(id, parsed))
        assert.deepStrictEqual(Array.from(words), Array.from(parsed), "its 128 bits, as parseUuid reads the text")
      }
      seen.add(id)
      assert.strictEqual(buf[1], 0x7e, "nothing written before")
      assert.strictEqual(buf[2 + UUID_CHARS], 0x7e, "nothing written after")
    }
    assert.strictEqual(seen.size, 1000)
  })

  for (const fsync of ["always", "never"] as const) {
    it.effect(`300 producers appending at once (fsync ${fsync}) each get their own entry back, durable and read back alike`, () =>
      Effect.gen(function*() {
        const dir = tmp.next()
        const sent = (p: number, n: number) => ({ channel: "c", to: `r${p}`, body: { p, n, text: "é".repeat(n) } })
        const { got, pending } = yield* Effect.scoped(
          Effect.gen(function*() {
            const log = yield* DeliveryLog.open({ dir, fsync })
            const got = yield* Effect.forEach(
              Array.from({ length: 300 }, (_, p) => p),
              (p) => Effect.forEach([0, 1, 2], (n) => log.append(sent(p, n))),
              { concurrency: "unbounded" }
            )
            return { got, pending: yield* log.pending }
          })
        )
        const ids = new Set<string>()
        got.forEach((entries, p) =>
          entries.forEach((e, n) => {
            assert.deepStrictEqual(e.message, sent(p, n), `producer ${p}, append ${n}`)
            assert.match(e.id, V4)
            ids.add(e.id)
          })
        )
        assert.strictEqual(ids.size, 900)
        const byId = new Map(got.flat().map((e) => [e.id, e]))
        assert.strictEqual(pending.length, 900)
        for (const e of pending) assert.deepStrictEqual(e, byId.get(e.id))
        assert.deepStrictEqual(pending.map((e) => e.seq), Array.from({ length: 900 }, (_, i) => i + 1))
        const reopened = yield* Effect.scoped(
          Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (l) => l.pending)
        )
        assert.deepStrictEqual(reopened, pending)
      }))
  }
})
