/**
 * CRC-32 (IEEE 802.3, the polynomial zlib uses: `zlib.crc32` gives the same value) of `buf[start, end)`,
 * table-driven, eight bytes a step (slicing-by-8). As fast as `zlib.crc32` on a record's few hundred
 * bytes, and it needs no `subarray` view (an allocation per record on the append path).
 */

const TABLES = (() => {
  const t = new Int32Array(256 * 8)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    t[n] = c
  }
  for (let n = 0; n < 256; n++) {
    let c = t[n]!
    for (let k = 1; k < 8; k++) {
      c = t[c & 255]! ^ (c >>> 8)
      t[k * 256 + n] = c
    }
  }
  return t
})()

/** CRC-32 of `buf[start, end)`, as an unsigned 32-bit number. */
export const crc32Range = (buf: Uint8Array, start: number, end: number): number => {
  const t = TABLES
  let c = -1
  let i = start
  for (; i + 8 <= end; i += 8) {
    const a = (buf[i]! | (buf[i + 1]! << 8) | (buf[i + 2]! << 16) | (buf[i + 3]! << 24)) ^ c
    c = t[1792 + (a & 255)]! ^ t[1536 + ((a >>> 8) & 255)]! ^ t[1280 + ((a >>> 16) & 255)]! ^ t[1024 + (a >>> 24)]! ^
      t[768 + buf[i + 4]!]! ^ t[512 + buf[i + 5]!]! ^ t[256 + buf[i + 6]!]! ^ t[buf[i + 7]!]!
  }
  for (; i < end; i++) c = t[(c ^ buf[i]!) & 255]! ^ (c >>> 8)
  return (c ^ -1) >>> 0
}
