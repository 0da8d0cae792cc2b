/**
 * The 64-bit digest that stands for an idempotency key in the dedupe window: two 32-bit
 * murmur3-style lanes with different seeds over the key's UTF-16 code units. A digest is a
 * hint, never proof: a hit is checked against the key in the entry's record, so two keys with
 * one digest cost a read, never a lost message.
 */

/** Write the digest of `key` to `out[0]`, `out[1]`. Injectable (tests force collisions). */
export type KeyDigest = (key: string, out: Uint32Array) => void

const fmix = (h: number): number => {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b)
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35)
  return (h ^ (h >>> 16)) >>> 0
}

/** One 32-bit block (two code units, or the last one) scrambled before it is mixed into a lane. */
const scramble = (k: number): number => {
  k = Math.imul(k, 0xcc9e2d51)
  k = (k << 15) | (k >>> 17)
  return Math.imul(k, 0x1b873593)
}

/** Lane 1 after a whole block. */
const mix1 = (h1: number, k: number): number => {
  h1 ^= k
  h1 = (h1 << 13) | (h1 >>> 19)
  return (Math.imul(h1, 5) + 0xe6546b64) | 0
}

/** Lane 2 after a whole block. */
const mix2 = (h2: number, k: number): number => {
  h2 = Math.imul(h2 ^ k, 0x27d4eb2f)
  h2 = (h2 << 17) | (h2 >>> 15)
  return (Math.imul(h2, 0x165667b1) + 0x9e3779b9) | 0
}

const SEED1 = 0x9747b28c
const SEED2 = 0x2f1a5c3d

/** The default digest. */
export const digestKey: KeyDigest = (key, out) => {
  const n = key.length
  let h1 = SEED1
  let h2 = SEED2 ^ n
  let i = 0
  for (; i + 1 < n; i += 2) {
    const k = scramble(key.charCodeAt(i) | (key.charCodeAt(i + 1) << 16))
    h1 = mix1(h1, k)
    h2 = mix2(h2, k)
  }
  if (i < n) {
    const k = scramble(key.charCodeAt(i))
    h1 ^= k
    h2 = Math.imul(h2 ^ k, 0x27d4eb2f)
  }
  h1 ^= n
  out[0] = fmix(h1)
  out[1] = fmix(h2 ^ h1)
}

/**
 * `digestKey` of the key whose UTF-8 bytes are `buf[start, end)`, when they are all ASCII (then they
 * are its UTF-16 code units); false (out unchanged) otherwise. Replay digests keys without making them strings.
 */
export const digestAsciiKey = (buf: Uint8Array, start: number, end: number, out: Uint32Array): boolean => {
  const n = end - start
  let h1 = SEED1
  let h2 = SEED2 ^ n
  let i = start
  for (; i + 1 < end; i += 2) {
    const a = buf[i]!
    const b = buf[i + 1]!
    if ((a | b) > 0x7f) return false
    const k = scramble(a | (b << 16))
    h1 = mix1(h1, k)
    h2 = mix2(h2, k)
  }
  if (i < end) {
    const last = buf[i]!
    if (last > 0x7f) return false
    const k = scramble(last)
    h1 ^= k
    h2 = Math.imul(h2 ^ k, 0x27d4eb2f)
  }
  h1 ^= n
  out[0] = fmix(h1)
  out[1] = fmix(h2 ^ h1)
  return true
}
