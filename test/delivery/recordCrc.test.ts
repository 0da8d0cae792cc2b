/**
 * A record's CRC-32 is checked with the table-driven CRC below 256 bytes and `zlib.crc32` above
 * (record.ts): either way a record reads back whole, and any single flipped bit in it (CRC, length,
 * number, kind or payload) makes it invalid.
 */
import fc from "fast-check"
import { assert, describe, it } from "vitest"
import { decodeAt, encode, Kind } from "../../src/delivery/record.js"

describe("record CRC-32 check", () => {
  it("short and long records decode whole; any flipped bit makes them invalid", () => {
    fc.assert(
      fc.property(
        fc.string({ unit: "binary-ascii", maxLength: 600 }),
        fc.integer({ min: 1, max: 2 ** 40 }),
        fc.nat(),
        (payload, lsn, pick) => {
          const bytes = Buffer.byteLength(payload)
          const rec = encode(lsn, Kind.append, payload, bytes)
          const buf = Buffer.concat([Buffer.from("xyz"), rec])
          const ok = decodeAt(buf, 3, rec.length, rec.length, 1 << 20)
          assert.notTypeOf(ok, "string")
          if (typeof ok === "string") return
          assert.strictEqual(ok.lsn, lsn)
          assert.strictEqual(ok.kind, Kind.append)
          assert.strictEqual(buf.toString("latin1", ok.start, ok.end), Buffer.from(payload).toString("latin1"))
          const bit = pick % (8 * rec.length)
          const flipped = Buffer.from(buf)
          flipped[3 + (bit >> 3)]! ^= 1 << (bit & 7)
          assert.typeOf(decodeAt(flipped, 3, rec.length, rec.length, 1 << 20), "string", `bit ${bit} of ${rec.length}`)
        }
      ),
      { numRuns: 3000 }
    )
  })
})
