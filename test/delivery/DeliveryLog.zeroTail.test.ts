/**
 * The zero-filled tail (docs/delivery-log-format.md, "Torn tail vs corruption"): the writer fills the
 * active segment ahead with zeros and overwrites them in place, so after a crash the last segment
 * ends with zeros past its last record. Open reads that as the end of its records (cut, no warning);
 * zeros anywhere else, or zeros followed by a valid record, are refused as before.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import { join } from "node:path"
import { DeliveryLog } from "../../src/delivery/index.js"
import { encode, Kind } from "../../src/delivery/record.js"
import { copyLogDir, failure, recordBoundaries, snapshotFiles, tempRoot, withWarnings } from "./fixtures/files.js"

const tmp = tempRoot("log-zero-tail")
afterAll(tmp.rm)

const logs = (dir: string) => fs.readdirSync(dir).filter((f) => f.endsWith(".log")).sort()

/** A closed log of `n` appends (bodies 1..n) in segments of `segmentBytes`. */
const written = (n: number, segmentBytes?: number) =>
  Effect.gen(function*() {
    const dir = tmp.next()
    yield* Effect.scoped(
      Effect.flatMap(
        DeliveryLog.open({ dir, fsync: "never", ...(segmentBytes === undefined ? {} : { segmentBytes }) }),
        (log) =>
          Effect.forEach(Array.from({ length: n }, (_, i) => i + 1), (i) =>
            log.append({ channel: "c", to: "r", body: i }))
      )
    )
    return dir
  })

const bodies = (dir: string) =>
  Effect.scoped(
    Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (l) =>
      Effect.map(l.pending, (es) => es.map((e) => e.message.body)))
  )

describe("DeliveryLog zero-filled tail", () => {
  it.effect("zeros after the last record of the last segment end its records: cut there, no torn-tail warning, the log goes on", () =>
    Effect.gen(function*() {
      const dir = yield* written(3)
      const file = join(dir, logs(dir)[0]!)
      const size = fs.statSync(file).size
      for (const zeros of [1, 16, 17, 4096, 3 << 20]) {
        const d = copyLogDir(dir, tmp.next())
        fs.appendFileSync(join(d, logs(d)[0]!), Buffer.alloc(zeros))
        const { got, warnings } = yield* withWarnings((warnings) =>
          Effect.map(bodies(d), (got) => ({ got, warnings: [...warnings] }))
        )
        assert.deepStrictEqual(got, [1, 2, 3], `${zeros} zeros`)
        assert.deepStrictEqual(warnings, [], `${zeros} zeros: nothing torn to warn about`)
        assert.strictEqual(fs.statSync(join(d, logs(d)[0]!)).size, size, "cut back to its records")
      }
    }))

  it.effect("a torn record followed by zeros (a crash inside the filled space) is a torn tail: cut at its start, with the warning", () =>
    Effect.gen(function*() {
      const dir = yield* written(3)
      const file = join(dir, logs(dir)[0]!)
      const bounds = recordBoundaries(file)
      const buf = fs.readFileSync(file)
      // The last record's second half never reached the disk: zeros from there, then more zeros.
      buf.fill(0, bounds[2]! + 20)
      fs.writeFileSync(file, Buffer.concat([buf, Buffer.alloc(8192)]))
      const { got, warnings } = yield* withWarnings((warnings) =>
        Effect.map(bodies(dir), (got) => ({ got, warnings: [...warnings] }))
      )
      assert.deepStrictEqual(got, [1, 2])
      assert.strictEqual(warnings.length, 1)
      assert.include(warnings[0], "cut a torn tail")
      assert.strictEqual(fs.statSync(file).size, bounds[2])
    }))

  it.effect("zeros followed by a valid record with a higher number are corruption: refused, nothing changed on disk", () =>
    Effect.gen(function*() {
      const dir = yield* written(3)
      const file = join(dir, logs(dir)[0]!)
      const size = fs.statSync(file).size
      fs.appendFileSync(file, Buffer.concat([Buffer.alloc(1000), encode(4, Kind.requeue, "x", 1)]))
      const before = snapshotFiles(dir)
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never" })))
      assert.strictEqual(e.reason, "corrupt")
      assert.include(e.message, `at offset ${size}`)
      assert.deepStrictEqual(snapshotFiles(dir), before)
    }))

  it.effect("zeros in the middle of the last segment, valid records after them, are corruption", () =>
    Effect.gen(function*() {
      const dir = yield* written(4)
      const file = join(dir, logs(dir)[0]!)
      const bounds = recordBoundaries(file)
      const buf = fs.readFileSync(file)
      buf.fill(0, bounds[1]!, bounds[2]!)
      fs.writeFileSync(file, buf)
      const before = snapshotFiles(dir)
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never" })))
      assert.strictEqual(e.reason, "corrupt")
      assert.include(e.message, `at offset ${bounds[1]}`)
      assert.deepStrictEqual(snapshotFiles(dir), before)
    }))

  it.effect("a zero-filled tail in a sealed segment is corruption (the writer cuts a segment to its records before it seals it)", () =>
    Effect.gen(function*() {
      const dir = yield* written(12, 300)
      const names = logs(dir)
      assert.isAbove(names.length, 2)
      const file = join(dir, names[0]!)
      const size = fs.statSync(file).size
      fs.appendFileSync(file, Buffer.alloc(4096))
      const before = snapshotFiles(dir)
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never" })))
      assert.strictEqual(e.reason, "corrupt")
      assert.strictEqual(e.path, file)
      assert.include(e.message, `at offset ${size}`)
      assert.deepStrictEqual(snapshotFiles(dir), before)
    }))

  it.effect("a last segment of only zeros while the MANIFEST recorded its records is corruption, as an emptied one", () =>
    Effect.gen(function*() {
      const dir = yield* written(3)
      const file = join(dir, logs(dir)[0]!)
      fs.writeFileSync(file, Buffer.alloc(fs.statSync(file).size + 4096))
      const before = snapshotFiles(dir)
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never" })))
      assert.strictEqual(e.reason, "corrupt")
      assert.strictEqual(e.path, file)
      assert.include(e.message, "only zeros")
      assert.deepStrictEqual(snapshotFiles(dir), before)
    }))

  it.effect("the writer (fsync always) fills the active segment ahead with zeros; sealed and closed segments end at their last record", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const segmentBytes = 64 * 1024
      const ended = (name: string) => {
        const bounds = recordBoundaries(join(dir, name))
        return bounds[bounds.length - 1] === fs.statSync(join(dir, name)).size
      }
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, segmentBytes })
          yield* Effect.forEach(
            Array.from({ length: 2000 }, (_, i) => i),
            (i) => log.append({ channel: "c", to: `r${i % 7}`, body: { i, text: "x".repeat(i % 50) } }),
            { concurrency: 64, discard: true }
          )
          const names = logs(dir)
          assert.isAbove(names.length, 2)
          // Filled to the segment's end (the stretch is 4 MiB): records are written over zeros.
          const active = fs.readFileSync(join(dir, names[names.length - 1]!))
          assert.strictEqual(active.length, segmentBytes)
          const bounds = recordBoundaries(join(dir, names[names.length - 1]!))
          const recordsEnd = bounds.findIndex((b, i) => i > 0 && b === bounds[i - 1]! + 17)
          assert.isAbove(recordsEnd, 0)
          assert.isTrue(
            active.subarray(bounds[recordsEnd - 1]!).equals(Buffer.alloc(segmentBytes - bounds[recordsEnd - 1]!))
          )
          for (const name of names.slice(0, -1)) assert.isTrue(ended(name), `sealed ${name} ends at its last record`)
        })
      )
      for (const name of logs(dir)) assert.isTrue(ended(name), `closed ${name} ends at its last record`)
      const pending = yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (l) => l.pending))
      assert.strictEqual(pending.length, 2000)
    }))
})
