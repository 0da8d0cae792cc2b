/**
 * Entry ids: random (version 4) UUIDs, 36 lowercase characters, the format and randomness of
 * `crypto.randomUUID` (which also draws from a buffered pool), written straight into the record as
 * ASCII so that the id string is one slice of those bytes. `randomUUID` builds its string from twenty
 * pieces, ~600 bytes of garbage per id on the append path.
 */
import { randomFillSync } from "node:crypto"

const POOL_BYTES = 4096
const pool = Buffer.allocUnsafeSlow(POOL_BYTES)
let used = POOL_BYTES

/** The two ASCII hex digits of every byte value: `HEX[2b]`, `HEX[2b + 1]`. */
const HEX = (() => {
  const t = new Uint8Array(512)
  const digits = "0123456789abcdef"
  for (let b = 0; b < 256; b++) {
    t[2 * b] = digits.charCodeAt(b >> 4)
    t[2 * b + 1] = digits.charCodeAt(b & 15)
  }
  return t
})()

/** Bytes of a UUID's text. */
export const UUID_CHARS = 36

/**
 * Write a fresh random UUID as ASCII at `buf[at, at + 36)`; with `words`, its 128 bits there too
 * (`words[0..4)`, as `parseUuid` reads the text).
 */
export const writeUuid = (buf: Uint8Array, at: number, words?: Uint32Array): void => {
  if (used + 16 > POOL_BYTES) {
    randomFillSync(pool)
    used = 0
  }
  const r = used
  used += 16
  let p = at
  let word = 0
  for (let i = 0; i < 16; i++) {
    if (i === 4 || i === 6 || i === 8 || i === 10) buf[p++] = 0x2d
    // RFC 9562: the version (4) in the high nibble of byte 6, the variant (10xx) in the high bits of byte 8.
    const b = i === 6 ? (pool[r + i]! & 0x0f) | 0x40 : i === 8 ? (pool[r + i]! & 0x3f) | 0x80 : pool[r + i]!
    buf[p++] = HEX[2 * b]!
    buf[p++] = HEX[2 * b + 1]!
    if (words !== undefined) word = (word << 8) | b
    if ((i & 3) === 3 && words !== undefined) words[i >> 2] = word >>> 0
  }
}
