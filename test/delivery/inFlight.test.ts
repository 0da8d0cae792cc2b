/**
 * Two durable writes in flight (`maxWritesInFlight: 2`, format 3; docs/delivery-log-format.md, "Two
 * writes in flight"): every batch starts with a batch record naming the offset below which every byte
 * was durable when its write began, and batches are acknowledged strictly in order. Recovery cuts a
 * hole followed by the one batch written while it was in flight (neither was acknowledged), and still
 * refuses everything else a bad record followed by valid ones can be. The files below are real logs
 * written by the log, then cut, zeroed or damaged as a crash or a disk would.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import fsDefault from "node:fs"
import { syncBuiltinESMExports } from "node:module"
import { join } from "node:path"
import { GroupCommitWriter, PIPELINE_MIN_CALLS } from "../../src/delivery/groupCommit.js"
import { DeliveryLog } from "../../src/delivery/index.js"
import { BATCH_RECORD_BYTES, Kind, sealBatch } from "../../src/delivery/record.js"
import { createSegment } from "../../src/delivery/segment.js"
import { copyLogDir, failure, snapshotFiles, tempRoot, withWarnings } from "./fixtures/files.js"

const tmp = tempRoot("log-in-flight")
afterAll(tmp.rm)

const logs = (dir: string) => fs.readdirSync(dir).filter((f) => f.endsWith(".log")).sort()

interface Rec {
  readonly at: number
  readonly end: number
  readonly kind: number
  readonly lsn: number
  /** A batch record's `durableBelow`. */
  readonly below: number
}

/** The records of a whole, valid file, front to back. */
const records = (file: string): Array<Rec> => {
  const buf = fs.readFileSync(file)
  const out: Array<Rec> = []
  for (let at = 0; at + 17 <= buf.length;) {
    const len = buf.readUInt32BE(at + 4)
    const kind = buf[at + 16]!
    const lsn = buf.readUInt32BE(at + 8) * 2 ** 32 + buf.readUInt32BE(at + 12)
    const below = kind === Kind.batch ? buf.readUInt32BE(at + 17) * 2 ** 32 + buf.readUInt32BE(at + 21) : -1
    out.push({ at, end: at + 17 + len, kind, lsn, below })
    at += 17 + len
  }
  return out
}

/** A closed log of `producers` x `per` appends (bodies `p*1000+n`) written with `maxWritesInFlight`. */
const written = (inFlight: 1 | 2, producers = 64, per = 6) =>
  Effect.gen(function*() {
    const dir = tmp.next()
    yield* Effect.scoped(
      Effect.flatMap(
        DeliveryLog.open({ dir, maxWritesInFlight: inFlight }),
        (log) =>
          Effect.forEach(
            Array.from({ length: producers }, (_, p) => p),
            (p) =>
              Effect.gen(function*() {
                for (let n = 0; n < per; n++) yield* log.append({ channel: "c", to: `r${p}`, body: p * 1000 + n })
              }),
            { concurrency: "unbounded", discard: true }
          )
      )
    )
    return dir
  })

const bodies = (dir: string) =>
  Effect.scoped(
    Effect.flatMap(
      DeliveryLog.open({ dir }),
      (l) => Effect.map(l.pending, (es) => es.map((e) => e.message.body as number))
    )
  )

/** Bodies of the append records ending at or before `to` in `file`, in file order. */
const bodiesBefore = (file: string, to: number): Array<number> => {
  const buf = fs.readFileSync(file)
  return records(file).filter((r) => r.kind === Kind.append && r.end <= to).map((r) => {
    const text = buf.toString("utf8", r.at, r.end)
    return Number(/"body":(\d+)/.exec(text)![1])
  })
}

/** Two batches in `file`: `second` was written while `first` was in flight (its durableBelow is `first`'s start). */
const overlapping = (file: string) => {
  const rs = records(file)
  const batches = rs.filter((r) => r.kind === Kind.batch)
  for (let i = 1; i + 1 < batches.length; i++) {
    const second = batches[i]!
    const first = batches[i - 1]!
    if (second.below === first.at && first.at < second.at) {
      const inFirst = rs.filter((r) => r.at > first.at && r.at < second.at)
      return { first, second, third: batches[i + 1]!, inFirst, endOfSecond: batches[i + 1]!.at }
    }
  }
  return assert.fail("no batch written while another was in flight")
}

describe("DeliveryLog with two writes in flight", () => {
  it.effect("options: maxWritesInFlight is 1 or 2, and 2 is refused with writes \"inline\"", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const bad = yield* failure(Effect.scoped(DeliveryLog.open({ dir, maxWritesInFlight: 3 as 2 })))
      assert.strictEqual(bad.reason, "invalid")
      assert.match(bad.message, /maxWritesInFlight` to be 1 or 2, got `3`/)
      const inline = yield* failure(
        Effect.scoped(DeliveryLog.open({ dir, maxWritesInFlight: 2, writes: "inline" }))
      )
      assert.strictEqual(inline.reason, "invalid")
      assert.match(inline.message, /thread pool/)
    }))

  it.effect("64 producers: batches of at least PIPELINE_MIN_CALLS overlap, each starts with a batch record, and everything reopens (with either setting)", () =>
    Effect.gen(function*() {
      const dir = yield* written(2)
      const file = join(dir, logs(dir)[0]!)
      const rs = records(file)
      const batches = rs.filter((r) => r.kind === Kind.batch)
      assert.isAbove(batches.length, 4)
      assert.isTrue(batches.some((b) => b.below < b.at), "some batch was written while another was in flight")
      for (const b of batches) assert.isAtMost(b.below, b.at)
      // A batch record takes no lsn: the next record has the same.
      for (let i = 0; i + 1 < rs.length; i++) {
        if (rs[i]!.kind === Kind.batch) assert.strictEqual(rs[i + 1]!.lsn, rs[i]!.lsn)
      }
      const got = yield* bodies(dir)
      assert.strictEqual(got.length, 64 * 6)
      // Reopened with one write in flight, then two again: a file holds both kinds of batches.
      yield* Effect.scoped(
        Effect.flatMap(DeliveryLog.open({ dir }), (l) => l.append({ channel: "c", to: "x", body: 1_000_000 }))
      )
      yield* Effect.scoped(
        Effect.flatMap(
          DeliveryLog.open({ dir, maxWritesInFlight: 2 }),
          (l) => l.append({ channel: "c", to: "x", body: 1_000_001 })
        )
      )
      const again = yield* bodies(dir)
      assert.deepStrictEqual(again.slice(-2), [1_000_000, 1_000_001])
      assert.strictEqual(again.length, 64 * 6 + 2)
    }))

  it.effect("a hole in a batch followed by the batch written while it was in flight (a crash between the two writes) is cut at the hole, with a warning", () =>
    Effect.gen(function*() {
      const dir = yield* written(2)
      const file = join(dir, logs(dir)[0]!)
      const { endOfSecond, first, inFirst, second } = overlapping(file)
      // Holes: the whole first batch (its batch record too), from its second record on, and only its last record torn.
      const last = inFirst[inFirst.length - 1]!
      for (
        const [what, hole] of [
          ["the whole first batch", first.at],
          ["from its second record", inFirst[1]!.at],
          ["its last record torn", last.at + 10]
        ] as const
      ) {
        const d = copyLogDir(dir, tmp.next())
        const f = join(d, logs(d)[0]!)
        const buf = fs.readFileSync(f)
        buf.fill(0, hole, second.at)
        // The crash came before anything after the second batch was written; the filled space stays zeros.
        buf.fill(0, endOfSecond)
        fs.writeFileSync(f, buf)
        const cut = what === "its last record torn" ? last.at : hole
        const { got, warnings } = yield* withWarnings((warnings) =>
          Effect.map(bodies(d), (got) => ({ got, warnings: [...warnings] }))
        )
        assert.deepStrictEqual(got, bodiesBefore(file, cut), what)
        assert.isTrue(
          warnings.some((w) => /in flight \(neither acknowledged\)/.test(w)),
          `${what}: ${warnings.join(" | ")}`
        )
        assert.strictEqual(fs.statSync(f).size, cut, `${what}: cut at the hole`)
        // The log goes on from there.
        yield* Effect.scoped(
          Effect.flatMap(
            DeliveryLog.open({ dir: d, maxWritesInFlight: 2 }),
            (l) => l.append({ channel: "c", to: "x", body: 7 })
          )
        )
        assert.deepStrictEqual((yield* bodies(d)).slice(-1), [7])
      }
    }))

  it.effect("the batch after the hole torn too (its write cut short) is cut with it", () =>
    Effect.gen(function*() {
      const dir = yield* written(2)
      const file = join(dir, logs(dir)[0]!)
      const { endOfSecond, first, second } = overlapping(file)
      const d = copyLogDir(dir, tmp.next())
      const f = join(d, logs(d)[0]!)
      const buf = fs.readFileSync(f)
      buf.fill(0, first.at + BATCH_RECORD_BYTES + 5, second.at)
      buf.fill(0, second.at + Math.floor((endOfSecond - second.at) / 2))
      fs.writeFileSync(f, buf)
      const got = yield* bodies(d)
      assert.deepStrictEqual(got, bodiesBefore(file, first.at + BATCH_RECORD_BYTES))
    }))

  it.effect("refused as corrupt, nothing changed: a batch after the one in flight, a batch not written in flight, a data record first, a damaged record earlier", () =>
    Effect.gen(function*() {
      const dir = yield* written(2)
      const file = join(dir, logs(dir)[0]!)
      const { endOfSecond, first, inFirst, second } = overlapping(file)
      const cases: Array<[string, (buf: Buffer) => void, number]> = [
        // The third batch began once the first was durable: a hole in the first is not a crash's.
        ["a later batch follows", (buf) => buf.fill(0, inFirst[1]!.at, second.at), inFirst[1]!.at],
        // The second batch's record says nothing was in flight when it was written.
        ["the batch after the hole was written alone", (buf) => {
          buf.fill(0, inFirst[1]!.at, second.at)
          buf.fill(0, endOfSecond)
          sealBatch(buf, second.at, second.lsn, second.at)
        }, inFirst[1]!.at],
        // Its batch record is gone too: the first valid record after the hole is a data record.
        ["no batch record after the hole", (buf) => {
          buf.fill(0, inFirst[1]!.at, second.at + BATCH_RECORD_BYTES)
          buf.fill(0, endOfSecond)
        }, inFirst[1]!.at],
        // A byte flipped in an acknowledged record, long before anything was in flight.
        ["a damaged record earlier", (buf) => {
          buf[records(file)[3]!.at + 30]! ^= 0x40
          buf.fill(0, endOfSecond)
        }, records(file)[3]!.at]
      ]
      for (const [what, damage, at] of cases) {
        const d = copyLogDir(dir, tmp.next())
        const f = join(d, logs(d)[0]!)
        const buf = fs.readFileSync(f)
        damage(buf)
        fs.writeFileSync(f, buf)
        const before = snapshotFiles(d)
        const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir: d })))
        assert.strictEqual(e.reason, "corrupt", what)
        assert.include(e.message, `offset ${at}`, what)
        assert.deepStrictEqual(snapshotFiles(d), before, `${what}: nothing changed on disk`)
      }
      // And the first file of these, not damaged, opens (the cases above are the damage, not the file).
      assert.strictEqual((yield* bodies(copyLogDir(dir, tmp.next()))).length, 64 * 6)
      assert.isAbove(first.at, -1)
    }))

  it.effect("old files (one write in flight, no batch records) are judged as before: a hole followed by valid records is corrupt, a torn tail is cut", () =>
    Effect.gen(function*() {
      const dir = yield* written(1)
      const file = join(dir, logs(dir)[0]!)
      const rs = records(file)
      assert.isFalse(rs.some((r) => r.kind === Kind.batch), "no batch record in a file of format 2")
      const mid = rs[Math.floor(rs.length / 2)]!
      const d = copyLogDir(dir, tmp.next())
      const f = join(d, logs(d)[0]!)
      const buf = fs.readFileSync(f)
      buf.fill(0, mid.at, mid.end)
      fs.writeFileSync(f, buf)
      const before = snapshotFiles(d)
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir: d })))
      assert.strictEqual(e.reason, "corrupt")
      assert.include(e.message, `offset ${mid.at}`)
      assert.deepStrictEqual(snapshotFiles(d), before)
      const t = copyLogDir(dir, tmp.next())
      const tf = join(t, logs(t)[0]!)
      const last = rs[rs.length - 1]!
      fs.truncateSync(tf, last.at + 20)
      assert.strictEqual((yield* bodies(t)).length, 64 * 6 - 1)
      assert.strictEqual(fs.statSync(tf).size, last.at)
    }))

  it.effect("completions strictly in order: a second write that returns first waits for the first", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      fs.mkdirSync(dir, { mode: 0o700 })
      const { fd } = createSegment(dir, 1, false)
      const written: Array<number> = []
      const writer = new GroupCommitWriter(
        dir,
        { number: 1, fd, size: 0, length: 0 },
        1 << 24,
        false,
        { onRoll: () => {}, onWritten: (_n, bytes) => written.push(bytes) },
        "auto",
        undefined,
        2
      )
      const original = fsDefault.write
      let heldFirst: (() => void) | undefined
      const order: Array<string> = []
      yield* Effect.acquireUseRelease(
        Effect.sync(() => {
          fsDefault.write = ((...args: Array<any>) => {
            if (args[0] === fd && heldFirst === undefined && args[4] === 0) {
              order.push("first issued, held")
              heldFirst = () => (original as any)(...args)
              return
            }
            if (args[0] === fd) order.push(`write at ${args[4]}`)
            ;(original as any)(...args)
          }) as typeof fsDefault.write
          syncBuiltinESMExports()
        }),
        () =>
          Effect.callback<void>((resume) => {
            let lsn = 1
            const push = (tag: string) => {
              const at = writer.reserve(40)
              writer.buffer.fill(1, at, at + 40)
              writer.buffer.writeUInt32BE(0, at + 8)
              writer.buffer.writeUInt32BE(lsn++, at + 12)
              writer.push((err) => {
                assert.isUndefined(err)
                order.push(tag)
              })
            }
            for (let i = 0; i < 2 * PIPELINE_MIN_CALLS; i++) push(i < PIPELINE_MIN_CALLS ? "a" : "b")
            // The second write is on its way while the first is held: give it time to return, then let the first go.
            setTimeout(() => {
              assert.isFalse(order.includes("a") || order.includes("b"), `nothing completed: ${order.join(",")}`)
              heldFirst!()
              setTimeout(() => resume(Effect.void), 100)
            }, 100)
          }),
        () =>
          Effect.sync(() => {
            fsDefault.write = original
            syncBuiltinESMExports()
          })
      )
      const firstB = order.indexOf("b")
      assert.strictEqual(order.lastIndexOf("a"), firstB - 1, `every a before any b: ${order.join(",")}`)
      assert.strictEqual(order.filter((o) => o === "a").length, PIPELINE_MIN_CALLS)
      assert.strictEqual(order.filter((o) => o === "b").length, PIPELINE_MIN_CALLS)
      assert.strictEqual(order[0], "first issued, held")
      assert.match(order[1]!, /^write at \d+/, "the second write went while the first was held")
      assert.deepStrictEqual(written.length, 2)
      yield* Effect.promise(() => writer.close())
    }))
})
