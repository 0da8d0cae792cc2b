/**
 * Recovery rule of the file log, on real files: a torn tail of the last segment is cut; anything
 * invalid elsewhere is corruption, refused with the file and offset, changing nothing on disk.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import { join } from "node:path"
import { DeliveryLog } from "../../src/delivery/index.js"
import { encode, type Kind } from "../../src/delivery/record.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"
import { failure, recordBoundaries, snapshotFiles, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-recovery")
afterAll(tmp.rm)

const segments = (dir: string, ext = ".log") => fs.readdirSync(dir).filter((f) => f.endsWith(ext)).sort()

/** Copy the segment files of `from` (not the lock) into a fresh dir. */
const copyLog = (from: string): string => {
  const to = tmp.next()
  fs.mkdirSync(to, { mode: 0o700 })
  for (const f of fs.readdirSync(from)) if (f !== "LOCK") fs.copyFileSync(join(from, f), join(to, f))
  return to
}

const ids = (es: ReadonlyArray<DeliveryEntry>) => es.map((e) => `${e.id}:${e.attempts}`)

describe("DeliveryLog recovery", () => {
  it.effect(
    "a last segment cut at every byte offset of its last records opens with exactly the records wholly before the cut",
    () =>
      Effect.gen(function*() {
        const dir = tmp.next()
        // After each call: the segment's size and the pending list, so each cut has a known expectation.
        const states: Array<{ end: number; pending: Array<string> }> = []
        yield* Effect.scoped(
          Effect.gen(function*() {
            const log = yield* DeliveryLog.open({ dir, fsync: "never" })
            const seg = () => fs.statSync(join(dir, segments(dir)[0]!)).size
            const note = Effect.gen(function*() {
              states.push({ end: seg(), pending: ids(yield* log.pending) })
            })
            const es: Array<DeliveryEntry> = []
            for (let i = 0; i < 5; i++) {
              es.push(yield* log.append({ channel: "c", to: `r${i}`, body: { i, text: "é".repeat(i) } }))
              yield* note
            }
            yield* log.attempt(es[3]!.id, { error: "down", nextAttemptAt: 9 })
            yield* note
            yield* log.ack(es[2]!.id)
            yield* note
            yield* log.append({ channel: "c", to: "last", body: [1, 2, 3] })
            yield* note
          })
        )
        const name = segments(dir)[0]!
        const full = fs.readFileSync(join(dir, name))
        const bounds = recordBoundaries(join(dir, name))
        assert.strictEqual(bounds[bounds.length - 1], full.length)
        const from = bounds[bounds.length - 4]! // the last three records
        let cuts = 0
        for (let cut = from; cut < full.length; cut++) {
          const d = copyLog(dir)
          fs.writeFileSync(join(d, name), full.subarray(0, cut))
          const expected = [...states].reverse().find((s) => s.end <= cut)!
          const pending = yield* Effect.scoped(
            Effect.flatMap(DeliveryLog.open({ dir: d, fsync: "never" }), (l) => l.pending)
          )
          assert.deepStrictEqual(ids(pending), expected.pending, `cut at ${cut}`)
          assert.strictEqual(
            fs.statSync(join(d, name)).size,
            expected.end,
            "the torn tail was cut at the record boundary"
          )
          cuts++
        }
        assert.isAbove(cuts, 100)
      }),
    120_000
  )

  it.effect("after a torn tail was cut the log goes on: new appends survive the next re-open", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.scoped(
        Effect.flatMap(
          DeliveryLog.open({ dir, fsync: "never" }),
          (log) => Effect.forEach([1, 2, 3], (i) => log.append({ channel: "c", to: "r", body: i }))
        )
      )
      const file = join(dir, segments(dir)[0]!)
      fs.truncateSync(file, fs.statSync(file).size - 5)
      yield* Effect.scoped(
        Effect.flatMap(
          DeliveryLog.open({ dir, fsync: "never" }),
          (log) => log.append({ channel: "c", to: "r", body: 4 })
        )
      )
      const pending = yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (l) => l.pending))
      assert.deepStrictEqual(pending.map((e) => e.message.body), [1, 2, 4])
    }))

  it.effect("a record failing its CRC at the very end of the last segment is a torn tail: cut there", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.scoped(
        Effect.flatMap(
          DeliveryLog.open({ dir, fsync: "never" }),
          (log) => Effect.forEach([1, 2, 3], (i) => log.append({ channel: "c", to: "r", body: i }))
        )
      )
      const file = join(dir, segments(dir)[0]!)
      const bounds = recordBoundaries(file)
      const buf = fs.readFileSync(file)
      buf[bounds[2]! + 20]! ^= 0x40
      fs.writeFileSync(file, buf)
      const pending = yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (l) => l.pending))
      assert.deepStrictEqual(pending.map((e) => e.message.body), [1, 2])
      assert.strictEqual(fs.statSync(file).size, bounds[2])
    }))

  it.effect("a bad record followed by valid ones in the last segment is corruption: refused, naming file and offset, nothing changed", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.scoped(
        Effect.flatMap(
          DeliveryLog.open({ dir, fsync: "never" }),
          (log) => Effect.forEach([1, 2, 3, 4], (i) => log.append({ channel: "c", to: "r", body: i }))
        )
      )
      const name = segments(dir)[0]!
      const file = join(dir, name)
      const bounds = recordBoundaries(file)
      // Damage the second record's length (and, separately, its payload): valid records follow.
      for (const at of [bounds[1]! + 6, bounds[1]! + 25]) {
        const d = copyLog(dir)
        const buf = fs.readFileSync(join(d, name))
        buf[at]! ^= 0x10
        fs.writeFileSync(join(d, name), buf)
        const before = snapshotFiles(d)
        const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir: d, fsync: "never" })))
        assert.strictEqual(e.reason, "corrupt")
        assert.strictEqual(e.path, join(d, name))
        assert.include(e.message, `at offset ${bounds[1]}`)
        assert.deepStrictEqual(snapshotFiles(d), before, "open changed nothing on disk")
      }
    }))

  it.effect("a whole record of an unknown kind at the end of the last segment is corruption, not a torn tail", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.scoped(
        Effect.flatMap(
          DeliveryLog.open({ dir, fsync: "never" }),
          (log) => Effect.forEach([1, 2], (i) => log.append({ channel: "c", to: "r", body: i }))
        )
      )
      const name = segments(dir)[0]!
      const size = fs.statSync(join(dir, name)).size
      fs.appendFileSync(join(dir, name), encode(3, 99 as Kind, "{}", 2))
      const before = snapshotFiles(dir)
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never" })))
      assert.strictEqual(e.reason, "corrupt")
      assert.include(e.message, `at offset ${size}`)
      assert.include(e.message, "unknown record kind")
      assert.deepStrictEqual(snapshotFiles(dir), before)
    }))

  it.effect("a whole record whose payload does not decode (valid CRC) is corruption, not a torn tail: refused, nothing changed", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.scoped(
        Effect.flatMap(
          DeliveryLog.open({ dir, fsync: "never" }),
          (log) => Effect.forEach([1, 2], (i) => log.append({ channel: "c", to: "r", body: i }))
        )
      )
      const name = segments(dir)[0]!
      const size = fs.statSync(join(dir, name)).size
      // kind 1 (append) whose id length runs past the payload, and one whose message is not the log's JSON object
      for (const payload of ["\u00ffabc", "\u0001x" + "\u0000".repeat(20) + "not json"]) {
        const d = tmp.next()
        fs.mkdirSync(d)
        fs.copyFileSync(join(dir, name), join(d, name))
        fs.appendFileSync(join(d, name), encode(3, 1 as Kind, payload, Buffer.byteLength(payload)))
        const before = snapshotFiles(d)
        const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir: d, fsync: "never" })))
        assert.strictEqual(e.reason, "corrupt")
        assert.include(e.message, `at offset ${size}`)
        assert.include(e.message, "does not decode")
        assert.deepStrictEqual(snapshotFiles(d), before)
      }
    }))

  it.effect("a record length is checked against maxRecordBytes before anything is allocated: a 4 GiB length is refused as corrupt", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.scoped(
        Effect.flatMap(
          DeliveryLog.open({ dir, fsync: "never" }),
          (log) => Effect.forEach([1, 2, 3], (i) => log.append({ channel: "c", to: "r", body: i }))
        )
      )
      const name = segments(dir)[0]!
      const bounds = recordBoundaries(join(dir, name))
      const buf = fs.readFileSync(join(dir, name))
      buf.writeUInt32BE(0xffff_fff0, bounds[2]! + 4) // the last record claims ~4 GiB
      fs.writeFileSync(join(dir, name), buf)
      const heapBefore = process.memoryUsage().arrayBuffers
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never" })))
      assert.strictEqual(e.reason, "corrupt")
      assert.include(e.message, `at offset ${bounds[2]}`)
      assert.include(e.message, "maxRecordBytes")
      assert.isBelow(
        process.memoryUsage().arrayBuffers - heapBefore,
        64 * 1024 * 1024,
        "nothing near the claimed size was allocated"
      )
    }))

  it.effect(
    "a flipped byte anywhere in a sealed segment: open refuses as corrupt, naming file and offset; files byte-for-byte unchanged",
    () =>
      Effect.gen(function*() {
        const dir = tmp.next()
        yield* Effect.scoped(
          Effect.flatMap(DeliveryLog.open({ dir, fsync: "never", segmentBytes: 200 }), (log) =>
            Effect.forEach([1, 2, 3, 4, 5, 6], (i) => log.append({ channel: "c", to: "r", body: { i } })))
        )
        const names = segments(dir)
        assert.isAbove(names.length, 2, "several segments")
        const sealed = names[0]!
        const bounds = recordBoundaries(join(dir, sealed))
        const size = fs.statSync(join(dir, sealed)).size
        for (let at = 0; at < size; at++) {
          const d = copyLog(dir)
          const buf = fs.readFileSync(join(d, sealed))
          buf[at]! ^= 1 << (at % 8)
          fs.writeFileSync(join(d, sealed), buf)
          const before = snapshotFiles(d)
          const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir: d, fsync: "never", segmentBytes: 200 })))
          assert.strictEqual(e.reason, "corrupt", `flip at ${at}`)
          assert.strictEqual(e.path, join(d, sealed))
          const start = [...bounds].reverse().find((b) =>
            b <= at
          )!
          assert.include(e.message, `at offset ${start}`)
          assert.deepStrictEqual(snapshotFiles(d), before, "open changed nothing on disk")
          fs.rmSync(d, { recursive: true })
        }
      }),
    120_000
  )

  it.effect("a flipped byte in a snapshot is corruption too", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, fsync: "never" })
          yield* Effect.forEach([1, 2, 3], (i) => log.append({ channel: "c", to: "r", body: i }))
          yield* log.compact
        })
      )
      const snap = segments(dir, ".snap")[0]!
      const buf = fs.readFileSync(join(dir, snap))
      buf[40]! ^= 0xff
      fs.writeFileSync(join(dir, snap), buf)
      const before = snapshotFiles(dir)
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never" })))
      assert.strictEqual(e.reason, "corrupt")
      assert.strictEqual(e.path, join(dir, snap))
      assert.deepStrictEqual(snapshotFiles(dir), before)
    }))

  it.effect("a missing segment in the middle is corruption (record numbers jump)", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.scoped(
        Effect.flatMap(DeliveryLog.open({ dir, fsync: "never", segmentBytes: 150 }), (log) =>
          Effect.forEach([1, 2, 3, 4, 5], (i) => log.append({ channel: "c", to: "r", body: { i } })))
      )
      const names = segments(dir)
      fs.rmSync(join(dir, names[1]!))
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never", segmentBytes: 150 })))
      assert.strictEqual(e.reason, "corrupt")
      assert.include(e.message, "missing")
    }))

  it.effect("a leftover temporary snapshot of an interrupted compaction is removed on open", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.scoped(
        Effect.flatMap(
          DeliveryLog.open({ dir, fsync: "never" }),
          (log) => log.append({ channel: "c", to: "r", body: 1 })
        )
      )
      fs.writeFileSync(join(dir, "0000000000000099.snap.tmp"), "half a snapshot")
      const pending = yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (l) => l.pending))
      assert.strictEqual(pending.length, 1)
      assert.isFalse(fs.existsSync(join(dir, "0000000000000099.snap.tmp")))
    }))
})
