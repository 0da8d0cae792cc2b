/**
 * The CHECKPOINT file's dedupe window (checkpoint.ts writes the rings straight from their arrays,
 * checkpointRead.ts reads them back): after random acks and evictions (the rings' oldest id anywhere,
 * their ids wrapping around the arrays' end), the window read back is the one written, tables
 * included (they are written as they are and renumbered on read); live entries whole or by place
 * (format 3; format 2 is read when it has none); a flipped or missing byte anywhere means no checkpoint.
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import { join } from "node:path"
import { crc32 } from "node:zlib"
import { afterAll } from "vitest"
import { AckedWindow } from "../../src/delivery/ackedWindow.js"
import {
  captureCheckpoint,
  CHECKPOINT,
  frameCheckpoint,
  SPARE,
  TABLES_FROM,
  writeCheckpoint
} from "../../src/delivery/checkpoint.js"
import { readCheckpoint } from "../../src/delivery/checkpointRead.js"
import { EntryData } from "../../src/delivery/entryData.js"
import { tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("checkpoint-file")
afterAll(tmp.rm)

const keyedEntry = (seq: number) =>
  new EntryData(
    randomUUID(),
    seq,
    1000 + seq,
    `reply:session-${seq % 7}:turn-${seq}`,
    JSON.stringify({ channel: "c", to: "t", body: seq }),
    0,
    undefined,
    undefined,
    "pending",
    true,
    200 + (seq % 50),
    seq % 3 === 0
  )

/** Write `w` (and `live`, their places found in file 1) as a checkpoint of `dir` covering one made-up file; its bytes. */
const write = (dir: string, w: AckedWindow, live: Array<EntryData> = [], tablesFrom = 0): Buffer => {
  const c = captureCheckpoint(dir, { nextLsn: 7, nextSeq: 9, liveBytes: 123 }, live, w.view(), undefined, tablesFrom)
  const rest = frameCheckpoint(c, [{ number: 1, kind: "log", size: 10, crc: 5 }], (address, out) => {
    out[0] = 1
    out[1] = address
    return true
  })
  writeCheckpoint(dir, c, rest)
  assert.isFalse(fs.existsSync(join(dir, `${CHECKPOINT}.tmp`)))
  return fs.readFileSync(join(dir, CHECKPOINT))
}

/** The window's parts, a ring's tables left out unless asked for (a ring not at its refilled capacity has none). */
const partsOf = (w: AckedWindow, plainTable: boolean, keyedTables: boolean) => {
  const p = w.parts()
  return {
    ...p,
    plain: plainTable ? p.plain : { ...p.plain, table: undefined },
    keyed: keyedTables ? p.keyed : { ...p.keyed, tables: undefined }
  }
}

const op = fc.oneof(
  fc.record({ add: fc.integer({ min: 1, max: 700 }), keyedShare: fc.integer({ min: 0, max: 4 }) }),
  fc.record({ evict: fc.integer({ min: 0, max: 100 }) })
)

describe("CHECKPOINT file: the dedupe window", () => {
  it("reads back the window written, its rings anywhere in their arrays, tables renumbered", () => {
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 12 }), (ops) => {
        const w = new AckedWindow()
        let seq = 1
        let t = 0
        for (const o of ops) {
          if ("add" in o) {
            for (let i = 0; i < o.add; i++, seq++) {
              // A millisecond every 3 acks (runs), a share keyed, a few kept (an id of another shape).
              const at = t + Math.floor(i / 3)
              if (seq % 97 === 0) w.add(`other-${seq}`, at, undefined, 80)
              else if (seq % 5 < o.keyedShare) w.addKeyed(keyedEntry(seq), at, 3, 64 * seq)
              else w.add(randomUUID(), at, undefined, 80)
            }
            t += Math.ceil(o.add / 3) + 1
          } else w.evict(t, Math.max(1, t - Math.floor((o.evict / 100) * t)), () => {})
        }
        const dir = tmp.next()
        fs.mkdirSync(dir)
        write(dir, w)
        const read = readCheckpoint(dir)
        assert.isDefined(read)
        assert.strictEqual(read!.nextLsn, 7)
        assert.strictEqual(read!.nextSeq, 9)
        assert.strictEqual(read!.liveBytes, 123)
        assert.deepStrictEqual(read!.files, [{ number: 1, kind: "log", size: 10, crc: 5 }])
        const again = new AckedWindow()
        again.restore(read!.acked)
        const written = w.parts()
        const plainTable = written.plain.table !== undefined
        const keyedTables = written.keyed.tables?.[0] !== undefined
        // The tables read are the written ones in ack order, and the restored rings keep them as they are.
        if (keyedTables) assert.deepStrictEqual(read!.acked.keyed.tables, written.keyed.tables)
        if (plainTable) assert.deepStrictEqual(read!.acked.plain.table, written.plain.table)
        assert.deepStrictEqual(partsOf(again, plainTable, keyedTables), partsOf(w, plainTable, keyedTables))
        assert.strictEqual(again.size, w.size)
      }),
      { numRuns: 60 }
    )
  })

  it("live entries: whole where their record's place is not known, by place (id and state) where it is", () => {
    const whole = keyedEntry(1)
    const placed = keyedEntry(2)
    placed.pos = 1234
    placed.attempts = 3
    placed.lastError = "zeitüberschreitung"
    placed.nextAttemptAt = 99
    placed.status = "dead"
    const w = new AckedWindow()
    w.add(randomUUID(), 1000, undefined, 80)
    const dir = tmp.next()
    fs.mkdirSync(dir)
    const files = [{ number: 1, kind: "log" as const, size: 10, crc: 5 }]
    const save = (locate: (address: number, out: Uint32Array) => boolean): Buffer => {
      const c = captureCheckpoint(dir, { nextLsn: 7, nextSeq: 9, liveBytes: 123 }, [whole, placed], w.view())
      writeCheckpoint(dir, c, frameCheckpoint(c, files, locate))
      return fs.readFileSync(join(dir, CHECKPOINT))
    }
    const bytes = save((address, out) => {
      out[0] = 1
      out[1] = address + 1
      return address === 1234
    })
    const read = readCheckpoint(dir)!
    assert.strictEqual(read.live.length, 2)
    assert.deepStrictEqual(read.live[0], { entry: whole, code: -1, offset: 0 })
    assert.deepStrictEqual(read.live[1], {
      entry: undefined,
      code: 1,
      offset: 1235,
      placed: {
        id: placed.id,
        status: "dead",
        started: false,
        attempts: 3,
        nextAttemptAt: 99,
        lastError: "zeitüberschreitung",
        bytes: placed.bytes
      }
    })
    assert.strictEqual(bytes.indexOf(placed.text), -1, "its message is not copied")
    assert.notStrictEqual(bytes.indexOf(whole.text), -1)
    // Format 2 (the same magic but for its last digit) has no entries by place: such a file is not read.
    const two = Buffer.from(bytes)
    two.write("SYCKPT02", 0, "latin1")
    two.writeUInt32LE(crc32(two.subarray(0, two.length - 4)), two.length - 4)
    fs.writeFileSync(join(dir, CHECKPOINT), two)
    assert.isUndefined(readCheckpoint(dir))
    // A place not located when it was framed: the checkpoint cannot stand for the files.
    save(() => false)
    assert.isUndefined(readCheckpoint(dir))
    // Format 2 with every entry whole is read as before.
    placed.pos = -1
    const whole2 = Buffer.from(save(() => false))
    whole2.write("SYCKPT02", 0, "latin1")
    whole2.writeUInt32LE(crc32(whole2.subarray(0, whole2.length - 4)), whole2.length - 4)
    fs.writeFileSync(join(dir, CHECKPOINT), whole2)
    assert.deepStrictEqual(readCheckpoint(dir)!.live.map((p) => p.entry), [whole, placed])
  })

  it("a small window's tables are not stored: a one-id window's checkpoint is small, and restores the same window", () => {
    for (const keyed of [false, true]) {
      const w = new AckedWindow()
      const id = randomUUID()
      if (keyed) w.addKeyed(keyedEntry(1), 1000, 3, 64)
      else w.add(id, 1000, undefined, 80)
      const dir = tmp.next()
      fs.mkdirSync(dir)
      // With the tables (as before): three tables of 2,048 cells, ~24 KB.
      assert.isAbove(write(dir, w, [], 0).length, 24_000)
      const bytes = write(dir, w, [], TABLES_FROM)
      assert.isBelow(bytes.length, 1024, `${bytes.length} bytes`)
      const read = readCheckpoint(dir)!
      assert.isUndefined(read.acked.plain.table)
      assert.isUndefined(read.acked.keyed.tables?.[0])
      assert.isUndefined(read.acked.keyed.tables?.[1])
      const again = new AckedWindow()
      again.restore(read.acked)
      assert.deepStrictEqual(partsOf(again, false, false), partsOf(w, false, false))
      if (!keyed) assert.isTrue(again.has(id))
    }
    // At `TABLES_FROM` ids a ring's tables are stored and used again as they are.
    const w = new AckedWindow()
    for (let i = 0; i < TABLES_FROM; i++) w.add(randomUUID(), 1000 + (i >> 4), undefined, 80)
    const dir = tmp.next()
    fs.mkdirSync(dir)
    write(dir, w, [], TABLES_FROM)
    const read = readCheckpoint(dir)!
    assert.deepStrictEqual(read.acked.plain.table, w.parts().plain.table)
  })

  it("each checkpoint is written over the file of the one before the newest (the spare), cut to its length; a spare that is a second name of CHECKPOINT is never written over", () => {
    const big = new AckedWindow()
    for (let i = 0; i < 3000; i++) big.add(randomUUID(), 1000 + i, undefined, 80)
    const small = new AckedWindow()
    const id = randomUUID()
    small.add(id, 1000, undefined, 80)
    const dir = tmp.next()
    fs.mkdirSync(dir)
    const ino = (name: string) => fs.statSync(join(dir, name)).ino
    const bigBytes = write(dir, big, [], TABLES_FROM)
    const first = ino(CHECKPOINT)
    assert.isFalse(fs.existsSync(join(dir, SPARE)))
    write(dir, big, [], TABLES_FROM)
    assert.strictEqual(ino(SPARE), first, "the checkpoint before the newest is the spare")
    const second = ino(CHECKPOINT)
    // Written over the spare (longer than it needs): the same file, cut to the new checkpoint's length.
    const smallBytes = write(dir, small, [], TABLES_FROM)
    assert.strictEqual(ino(CHECKPOINT), first)
    assert.strictEqual(ino(SPARE), second)
    assert.isBelow(smallBytes.length, bigBytes.length)
    assert.strictEqual(fs.statSync(join(dir, CHECKPOINT)).size, smallBytes.length)
    const restored = new AckedWindow()
    restored.restore(readCheckpoint(dir)!.acked)
    assert.isTrue(restored.has(id))
    // A crash between the link that keeps the spare and the rename: CHECKPOINT and the spare are one file.
    fs.rmSync(join(dir, SPARE))
    fs.linkSync(join(dir, CHECKPOINT), join(dir, SPARE))
    const c = captureCheckpoint(dir, { nextLsn: 7, nextSeq: 9, liveBytes: 123 }, [], big.view())
    // Captured (its rings written): the checkpoint in force is untouched.
    assert.deepStrictEqual(fs.readFileSync(join(dir, CHECKPOINT)), smallBytes)
    const again = new AckedWindow()
    again.restore(readCheckpoint(dir)!.acked)
    assert.isTrue(again.has(id))
    writeCheckpoint(dir, c, frameCheckpoint(c, [{ number: 1, kind: "log", size: 10, crc: 5 }], () => false))
    assert.strictEqual(readCheckpoint(dir)!.acked.plain.count, 3000)
    assert.strictEqual(ino(SPARE), first)
  })

  it("a flipped byte anywhere, or the file cut anywhere, means no checkpoint", () => {
    const w = new AckedWindow()
    for (let i = 1; i <= 300; i++) {
      if (i % 2 === 0) w.addKeyed(keyedEntry(i), 1000 + i, 3, 64 * i)
      else w.add(randomUUID(), 1000 + i, undefined, 80)
    }
    w.add("kept-id", 2000, keyedEntry(999), 300)
    const dir = tmp.next()
    fs.mkdirSync(dir)
    const placed = keyedEntry(1000)
    placed.pos = 77
    const bytes = write(dir, w, [keyedEntry(1001), placed])
    assert.isDefined(readCheckpoint(dir))
    const path = join(dir, CHECKPOINT)
    for (let at = 0; at < bytes.length; at += 1 + (at % 61)) {
      const flipped = Buffer.from(bytes)
      flipped[at]! ^= 0x10
      fs.writeFileSync(path, flipped)
      assert.isUndefined(readCheckpoint(dir), `byte ${at} flipped`)
    }
    for (const cut of [0, 4, 8, 16, bytes.length / 2, bytes.length - 9, bytes.length - 4, bytes.length - 1]) {
      fs.writeFileSync(path, bytes.subarray(0, Math.floor(cut)))
      assert.isUndefined(readCheckpoint(dir), `cut at ${cut}`)
    }
    fs.writeFileSync(path, bytes)
    assert.isDefined(readCheckpoint(dir))
  })
})
