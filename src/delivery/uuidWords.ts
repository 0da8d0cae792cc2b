/**
 * Ids as 128 bits: the log's ids are lowercase `randomUUID`s, and a canonical UUID and its 128 bits are
 * one-to-one, so the rings (idRing.ts) and replay keep and compare the bits, never the text.
 */

const HEX = "0123456789abcdef"

/** The value of a lowercase hex digit's char code, or -1. */
export const hexValue = (c: number): number => (c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : -1)

/** Dashes of a canonical UUID: 8-4-4-4-12. */
const isDash = (i: number): boolean => i === 8 || i === 13 || i === 18 || i === 23

/** The value of each ASCII code as a lowercase hex digit, -1 for any other. */
const HEX_OF = (() => {
  const t = new Int8Array(128).fill(-1)
  for (let c = 0; c < 16; c++) t[HEX.charCodeAt(c)] = c
  return t
})()

/** Hex digits `id[at, at + n)` as a number (`acc` first), or -1 if one is not a lowercase hex digit. */
const hexRun = (id: string, at: number, n: number, acc: number): number => {
  for (let i = at; i < at + n; i++) {
    const c = id.charCodeAt(i)
    const v = c < 128 ? HEX_OF[c]! : -1
    if (v < 0) return -1
    acc = acc * 16 + v
  }
  return acc
}

/**
 * Parse a canonical lowercase UUID into `out[0..4)`; false (out unchanged) for anything else. Unrolled by
 * word: the live entries' lookups parse the id of every call on an entry.
 */
export const parseUuid = (id: string, out: Uint32Array): boolean => {
  if (
    id.length !== 36 || id.charCodeAt(8) !== 45 || id.charCodeAt(13) !== 45 || id.charCodeAt(18) !== 45 ||
    id.charCodeAt(23) !== 45
  ) return false
  const w0 = hexRun(id, 0, 8, 0)
  const w1 = hexRun(id, 14, 4, hexRun(id, 9, 4, 0))
  const w2 = hexRun(id, 24, 4, hexRun(id, 19, 4, 0))
  const w3 = hexRun(id, 28, 8, 0)
  if (w0 < 0 || w1 < 0 || w2 < 0 || w3 < 0) return false
  out[0] = w0
  out[1] = w1
  out[2] = w2
  out[3] = w3
  return true
}

/** Byte -> its value as a lowercase hex digit, -1 for any other byte; -2 for the dash. */
const HEX_BYTES = (() => {
  const t = new Int8Array(256).fill(-1)
  for (let c = 0; c < 16; c++) t[HEX.charCodeAt(c)] = c
  t[45] = -2
  return t
})()

/** Offsets of the 32 hex digits of a canonical UUID. */
const DIGITS = Uint8Array.from({ length: 36 }, (_, i) => i).filter((i) => !isDash(i))

/**
 * `parseUuid` of the `len` bytes at `buf[at]` (an id as a record holds it), without making a string:
 * replay reads a snapshot's acked ids this way.
 */
export const parseUuidBytes = (buf: Uint8Array, at: number, len: number, out: Uint32Array): boolean => {
  if (len !== 36) return false
  if (buf[at + 8] !== 45 || buf[at + 13] !== 45 || buf[at + 18] !== 45 || buf[at + 23] !== 45) return false
  for (let w = 0; w < 4; w++) {
    let word = 0
    for (let k = 0; k < 8; k++) {
      const v = HEX_BYTES[buf[at + DIGITS[8 * w + k]!]!]!
      if (v < 0) return false
      word = (word << 4) | v
    }
    out[w] = word >>> 0
  }
  return true
}

/** The canonical text of 128 bits. */
export const formatUuid = (w0: number, w1: number, w2: number, w3: number): string => {
  let s = ""
  for (const w of [w0, w1, w2, w3]) {
    for (let shift = 28; shift >= 0; shift -= 4) {
      if (isDash(s.length)) s += "-"
      s += HEX[(w >>> shift) & 15]!
    }
  }
  return s
}

/** Lowercase hex digits as ASCII bytes. */
const HEX_ASCII = Uint8Array.from(HEX, (c) => c.charCodeAt(0))

/**
 * Write the canonical text of 128 bits as 36 ASCII bytes at `buf[at]` (the bytes of `formatUuid`'s
 * string, without making it): a snapshot writes its acked ids this way.
 */
export const writeUuidWords = (buf: Uint8Array, at: number, w0: number, w1: number, w2: number, w3: number): void => {
  let p = at
  for (let w = 0; w < 4; w++) {
    const word = w === 0 ? w0 : w === 1 ? w1 : w === 2 ? w2 : w3
    for (let shift = 28; shift >= 0; shift -= 4) {
      if (p - at === 8 || p - at === 13 || p - at === 18 || p - at === 23) buf[p++] = 45
      buf[p++] = HEX_ASCII[(word >>> shift) & 15]!
    }
  }
}

/** A 32-bit mix of four words (the table's home cell). */
export const hashWords = (a: number, b: number, c: number, d: number): number => {
  let h = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b)
  h = Math.imul(h ^ b ^ (h >>> 15), 0xc2b2ae35)
  h = Math.imul(h ^ c ^ (h >>> 13), 0x85ebca6b)
  h = Math.imul(h ^ d ^ (h >>> 16), 0xc2b2ae35)
  return (h ^ (h >>> 15)) >>> 0
}

/** Scratch for parsing a looked-up id. */
export const scratch = new Uint32Array(4)
