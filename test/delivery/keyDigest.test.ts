/**
 * Replay digests a key from its record's bytes (`digestAsciiKey`), the live log from the string
 * (`digestKey`): they must agree, or a key remembered across a crash would not dedupe.
 */
import fc from "fast-check"
import { assert, describe, it } from "vitest"
import { digestAsciiKey, digestKey } from "../../src/delivery/keyDigest.js"

describe("key digest", () => {
  it("the digest of an ASCII key's bytes is the digest of the key; a non-ASCII key's bytes are refused, out unchanged", () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 64 }), fc.string({ unit: "grapheme", maxLength: 8 }), (ascii, other) => {
        const fromString = new Uint32Array(2)
        const fromBytes = new Uint32Array(2)
        digestKey(ascii, fromString)
        const bytes = Buffer.from(`..${ascii}..`, "utf8")
        const isAscii = [...ascii].every((c) => c.charCodeAt(0) < 0x80)
        assert.strictEqual(digestAsciiKey(bytes, 2, bytes.length - 2, fromBytes), isAscii)
        if (isAscii) assert.deepStrictEqual([...fromBytes], [...fromString])
        const wide = `${ascii}é${other}`
        const wideBytes = Buffer.from(wide, "utf8")
        const untouched = new Uint32Array([7, 9])
        assert.isFalse(digestAsciiKey(wideBytes, 0, wideBytes.length, untouched))
        assert.deepStrictEqual([...untouched], [7, 9])
      }),
      { numRuns: 2000 }
    )
  })
})
