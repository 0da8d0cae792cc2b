/**
 * Recovery reads every file through one `ReadWindow` (segment.ts) instead of a new buffer a file: the
 * records, and the CRC-32 each reader keeps, must be what a reader with its own buffer gets, file after
 * file, also when a record is larger than the window (it grows) and when a file is shorter than it.
 */
import * as fs from "node:fs"
import { join } from "node:path"
import { crc32 } from "node:zlib"
import { afterAll, assert, describe, it } from "vitest"
import { encode, Kind } from "../../src/delivery/record.js"
import { checksumFile, readBuffer, ReadWindow, SegmentReader } from "../../src/delivery/segment.js"
import { tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("read-window")
afterAll(tmp.rm)

const MAX = 4 << 20

/** A file of records with these payload sizes (numbered from 1), and what it holds. */
const writeFile = (path: string, sizes: ReadonlyArray<number>, fill: string): Buffer => {
  const bytes = Buffer.concat(sizes.map((n, i) => encode(i + 1, Kind.ack, fill.repeat(n), n)))
  fs.writeFileSync(path, bytes)
  return bytes
}

/** Every record of `path` (lsn, payload) and the reader's CRC-32 at the end. */
const readAll = (path: string, window?: ReadWindow, from = 0, crc = 0) => {
  const fd = fs.openSync(path, "r")
  try {
    const size = fs.fstatSync(fd).size
    const reader = new SegmentReader(fd, size, MAX, from, crc, window)
    const records: Array<[number, string]> = []
    for (let r = reader.next(); r !== undefined; r = reader.next()) {
      if (typeof r === "string") throw new Error(r)
      records.push([r.lsn, r.buf.toString("latin1", r.start, r.end)])
    }
    return { records, crc: reader.checksum(size) }
  } finally {
    fs.closeSync(fd)
  }
}

describe("one read window for many files", () => {
  it("reads each file as a reader of its own would, growing for a record over the window, and hashes each file whole", () => {
    const dir = tmp.next()
    fs.mkdirSync(dir)
    const files = [
      // Many records over several windows, one larger than a window (1 MiB), then a short file.
      { name: "a", sizes: [...Array.from({ length: 9000 }, (_, i) => 50 + (i % 300)), (1 << 20) + 12345, 70] },
      { name: "b", sizes: Array.from({ length: 4000 }, (_, i) => 20 + (i % 900)) },
      { name: "c", sizes: [5, 6, 7] }
    ].map((f, i) => {
      const path = join(dir, f.name)
      return { path, bytes: writeFile(path, f.sizes, "abcdefgh"[i]!), count: f.sizes.length }
    })
    const window = new ReadWindow()
    for (const f of files) {
      const own = readAll(f.path)
      const shared = readAll(f.path, window)
      assert.strictEqual(shared.records.length, f.count)
      assert.deepStrictEqual(shared.records, own.records)
      assert.strictEqual(shared.crc, crc32(f.bytes))
      assert.strictEqual(own.crc, crc32(f.bytes))
      const fd = fs.openSync(f.path, "r")
      try {
        assert.strictEqual(checksumFile(fd, f.bytes.length, 0, 0, window), crc32(f.bytes))
        // From a point inside the file, carried on from the CRC of the bytes before it.
        const mid = Math.floor(f.bytes.length / 2)
        assert.strictEqual(
          checksumFile(fd, f.bytes.length, mid, crc32(f.bytes.subarray(0, mid)), window),
          crc32(f.bytes)
        )
        assert.strictEqual(checksumFile(fd, f.bytes.length + 1, 0, 0, window), -1, "a file shorter than asked")
      } finally {
        fs.closeSync(fd)
      }
    }
    // Replay from a record boundary inside a file (a checkpoint's end), with the CRC of the bytes before it.
    const a = files[0]!
    let at = 0
    for (let i = 0; i < 5000; i++) at += a.bytes.readUInt32BE(at + 4) + 17
    const resumed = readAll(a.path, window, at, crc32(a.bytes.subarray(0, at)))
    assert.strictEqual(resumed.records[0]![0], 5001)
    assert.strictEqual(resumed.records.length, a.count - 5000)
    assert.strictEqual(resumed.crc, crc32(a.bytes))
  })

  it("hands out views of one buffer until it must grow (its pages touched once per pass)", () => {
    const window = new ReadWindow()
    const first = window.forRead(0, 100)
    assert.strictEqual(first.length, 100)
    assert.isAtLeast(first.buffer.byteLength, 1 << 20)
    assert.strictEqual(window.forRead(12345, 1 << 20).buffer, first.buffer)
    const grown = window.forRead(0, (1 << 20) + 1)
    assert.notStrictEqual(grown.buffer, first.buffer)
    assert.strictEqual(grown.length, (1 << 20) + 1)
    assert.strictEqual(window.forRead(7, 10).buffer, grown.buffer)
  })

  it("places a read 2 KiB past its position's offset within a page (no page aliasing in the kernel's copy)", () => {
    const window = new ReadWindow()
    for (const position of [0, 1, 16, 2047, 2048, 4095, 4096, 7 * 4096 + 5, 123_456_789]) {
      for (const v of [window.forRead(position, 1 << 20), readBuffer(position, 100)]) {
        assert.strictEqual(v.byteOffset % 4096, (position + 2048) % 4096)
        assert.strictEqual(v.byteOffset + v.length <= v.buffer.byteLength, true)
      }
    }
  })
})
