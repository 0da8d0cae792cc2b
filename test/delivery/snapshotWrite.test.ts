/**
 * The snapshot writer (compaction.ts, `writeSnapshot`) frames its records in place in one reused buffer
 * and writes the plain acked ids straight from their 128 bits. Its file must be, byte for byte, what
 * framing every record on its own gives (`encode` for the JSON ones, `writeEntry` / `writeAcked` and
 * `seal` for the binary ones, every acked id from the window's copy as a string): across the buffer's
 * end (thousands of ids), with a record bigger than the buffer, and with kept ids before the plain ones.
 * The CRC-32, size and entry offsets it reports are those of that file.
 */
import { assert, describe, it } from "@effect/vitest"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import { join } from "node:path"
import { crc32 } from "node:zlib"
import { afterAll } from "vitest"
import { AckedWindow } from "../../src/delivery/ackedWindow.js"
import { type Captured, writeSnapshot } from "../../src/delivery/compaction.js"
import { EntryData } from "../../src/delivery/entryData.js"
import { ackedBytes, entryBytes, utf8Bytes, writeAcked, writeEntry, writeId } from "../../src/delivery/payload.js"
import { encode, HEADER_BYTES, Kind, seal } from "../../src/delivery/record.js"
import { segmentName } from "../../src/delivery/segment.js"
import { formatUuid, parseUuid, writeUuidWords } from "../../src/delivery/uuidWords.js"
import { ackedItems } from "./fixtures/ackedItems.js"
import { tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("snapshot-write")
afterAll(tmp.rm)

const entry = (seq: number, text: string, attempts = 0) =>
  new EntryData(
    randomUUID(),
    seq,
    1_700_000_000_000 + seq,
    seq % 2 === 0 ? `key-${seq}` : undefined,
    text,
    attempts,
    attempts > 0 ? "boom" : undefined,
    attempts > 0 ? 1_700_000_100_000 : undefined,
    "pending",
    true,
    300
  )

/** The file as framing every record on its own (the writer before it framed in place) gives it. */
const reference = (c: Captured): { bytes: Buffer; entriesAt: Array<number> } => {
  const out: Array<Buffer> = []
  let lsn = 0
  let size = 0
  const add = (b: Buffer) => {
    out.push(b)
    size += b.length
  }
  const json = (kind: Kind, payload: unknown) => {
    const s = JSON.stringify(payload)
    add(encode(++lsn, kind, s, Buffer.byteLength(s)))
  }
  const binary = (kind: Kind, bytes: number, fill: (buf: Buffer, at: number) => number) => {
    const buf = Buffer.alloc(HEADER_BYTES + bytes)
    assert.strictEqual(fill(buf, HEADER_BYTES), buf.length)
    seal(buf, 0, ++lsn, kind, bytes)
    add(buf)
  }
  json(Kind.snapshotBegin, {
    nextSeq: c.nextSeq,
    nextLsn: c.nextLsn,
    entries: c.entries.length,
    acked: c.acked.size,
    plain: c.acked.plain
  })
  const entriesAt: Array<number> = []
  for (const e of c.entries) {
    entriesAt.push(size)
    binary(Kind.snapshotEntry, entryBytes(e), (b, at) => writeEntry(b, at, e))
  }
  for (const [id, time, e] of ackedItems(c.acked)) {
    binary(Kind.snapshotAcked, ackedBytes(id, e), (b, at) => writeAcked(b, at, id, time, e))
  }
  json(Kind.snapshotEnd, { records: lsn + 1 })
  return { bytes: Buffer.concat(out), entriesAt }
}

describe("writeSnapshot", () => {
  it("writes a plain id's 36 ASCII bytes as formatUuid spells it", () => {
    const words = new Uint32Array(4)
    const buf = Buffer.alloc(40)
    for (let i = 0; i < 2_000; i++) {
      const id = i === 0
        ? "00000000-0000-0000-0000-000000000000"
        : i === 1
        ? "ffffffff-ffff-ffff-ffff-ffffffffffff"
        : randomUUID()
      assert.isTrue(parseUuid(id, words))
      writeUuidWords(buf, 2, words[0]!, words[1]!, words[2]!, words[3]!)
      assert.strictEqual(buf.toString("latin1", 2, 38), id)
      assert.strictEqual(formatUuid(words[0]!, words[1]!, words[2]!, words[3]!), id)
    }
  })

  it("writes an id as its length byte and its UTF-8 bytes, ASCII or not, short or long", () => {
    const ids = [
      randomUUID(),
      "a",
      "custom-id_42",
      "é",
      "ünïcödé-id",
      "✓".repeat(20),
      "😀x",
      "lone \ud800 surrogate",
      "x".repeat(64),
      "x".repeat(65),
      "y".repeat(255)
    ]
    for (const id of ids) {
      const n = utf8Bytes(id)
      const buf = Buffer.alloc(n + 3, 0xee)
      assert.strictEqual(writeId(buf, 1, id, n), n + 2, id)
      assert.strictEqual(buf[0], 0xee)
      assert.strictEqual(buf[1], n)
      assert.isTrue(buf.subarray(2, n + 2).equals(Buffer.from(id, "utf8")), id)
      assert.strictEqual(buf[n + 2], 0xee)
    }
  })

  it("writes the bytes each record framed on its own gives, across its buffer's end and past its size", async () => {
    const w = new AckedWindow()
    // Kept ids (of another shape, or with an entry) come first in the snapshot, then the plain ring's.
    for (let i = 0; i < 30; i++) {
      w.add(
        `custom-${i}`,
        5_000 + i,
        i % 3 === 0 ? entry(i, "{\"channel\":\"c\",\"to\":\"t\",\"body\":1}", 2) : undefined,
        80
      )
    }
    // ~63 bytes a plain id's record: 40,000 of them pass the 1 MiB buffer twice; runs of equal times.
    for (let i = 0; i < 40_000; i++) w.add(randomUUID(), 10_000 + Math.floor(i / 7), undefined, 80)
    const big = `{"channel":"c","to":"t","body":"${"x".repeat(1_500_000)}"}`
    const entries = [
      entry(1, "{\"channel\":\"c\",\"to\":\"t\",\"body\":{\"n\":1}}"),
      entry(2, big, 1),
      entry(3, "{\"channel\":\"c\",\"to\":\"t\",\"body\":\"é ✓ 😀\"}")
    ]
    const captured: Captured = { entries, acked: w.copy(), nextSeq: 77, nextLsn: 123_456 }
    assert.strictEqual(captured.acked.plain, 40_000)
    const dir = tmp.next()
    fs.mkdirSync(dir)
    const snap = await writeSnapshot({ dir, sync: false, maxRecordBytes: 4 * 1024 * 1024 }, 0, 5, captured, {})
    const file = fs.readFileSync(join(dir, segmentName(5, "snap")))
    const ref = reference(captured)
    assert.strictEqual(file.length, ref.bytes.length)
    assert.isTrue(file.equals(ref.bytes), "the snapshot's bytes")
    assert.strictEqual(snap.size, file.length)
    assert.strictEqual(snap.crc, crc32(file))
    assert.deepStrictEqual(Array.from(snap.entriesAt), ref.entriesAt)
  })

  it("writes an empty window and no entries as its two JSON records", async () => {
    const captured: Captured = { entries: [], acked: new AckedWindow().copy(), nextSeq: 1, nextLsn: 1 }
    const dir = tmp.next()
    fs.mkdirSync(dir)
    const snap = await writeSnapshot({ dir, sync: true, maxRecordBytes: 1024 }, 0, 3, captured, {})
    const file = fs.readFileSync(join(dir, segmentName(3, "snap")))
    assert.isTrue(file.equals(reference(captured).bytes))
    assert.strictEqual(snap.size, file.length)
    assert.strictEqual(snap.crc, crc32(file))
  })
})
