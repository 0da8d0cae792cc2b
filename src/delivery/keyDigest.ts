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

/** The default digest. */
export const digestKey: KeyDigest = (key, out) => {
  let h1 = 0x9747b28c
  let h2 = 0x2f1a5c3d ^ key.length
  const n = key.length
  let i = 0
  for (; i + 1 < n; i += 2) {
    let k = key.charCodeAt(i) | (key.charCodeAt(i + 1) << 16)
    k = Math.imul(k, 0xcc9e2d51)
    k = (k << 15) | (k >>> 17)
    k = Math.imul(k, 0x1b873593)
    h1 ^= k
    h1 = (h1 << 13) | (h1 >>> 19)
    h1 = (Math.imul(h1, 5) + 0xe6546b64) | 0
    h2 = Math.imul(h2 ^ k, 0x27d4eb2f)
    h2 = (h2 << 17) | (h2 >>> 15)
    h2 = (Math.imul(h2, 0x165667b1) + 0x9e3779b9) | 0
  }
  if (i < n) {
    let k = key.charCodeAt(i)
    k = Math.imul(k, 0xcc9e2d51)
    k = (k << 15) | (k >>> 17)
    k = Math.imul(k, 0x1b873593)
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
  let h1 = 0x9747b28c
  const n = end - start
  let h2 = 0x2f1a5c3d ^ n
  let i = start
  for (; i + 1 < end; i += 2) {
    const a = buf[i]!
    const b = buf[i + 1]!
    if ((a | b) > 0x7f) return false
    let k = a | (b << 16)
    k = Math.imul(k, 0xcc9e2d51)
    k = (k << 15) | (k >>> 17)
    k = Math.imul(k, 0x1b873593)
    h1 ^= k
    h1 = (h1 << 13) | (h1 >>> 19)
    h1 = (Math.imul(h1, 5) + 0xe6546b64) | 0
    h2 = Math.imul(h2 ^ k, 0x27d4eb2f)
    h2 = (h2 << 17) | (h2 >>> 15)
    h2 = (Math.imul(h2, 0x165667b1) + 0x9e3779b9) | 0
  }
  if (i < end) {
    let k = buf[i]!
    if (k > 0x7f) return false
    k = Math.imul(k, 0xcc9e2d51)
    k = (k << 15) | (k >>> 17)
    k = Math.imul(k, 0x1b873593)
    h1 ^= k
    h2 = Math.imul(h2 ^ k, 0x27d4eb2f)
  }
  h1 ^= n
  out[0] = fmix(h1)
  out[1] = fmix(h2 ^ h1)
  return true
}
