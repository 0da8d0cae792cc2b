/**
 * Faults: files of the log deleted, truncated or copied by hand. Each is refused by `open` as
 * `corrupt`, naming the damaged file (and offset), with nothing changed on disk; once the file is
 * put back, the log opens with everything it held.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import { join } from "node:path"
import { DeliveryLog } from "../../../src/delivery/index.js"
import type { DeliveryLog as Log } from "../../../src/delivery/types.js"
import { failure, recordBoundaries, snapshotFiles, tempRoot } from "../fixtures/files.js"

const tmp = tempRoot("fault-files")
afterAll(tmp.rm)

const msg = (i: number) => ({ channel: "c", to: `r${i % 3}`, body: { i, pad: "p".repeat(40) } })
const logs = (dir: string) => fs.readdirSync(dir).filter((f) => f.endsWith(".log")).sort()
const snaps = (dir: string) => fs.readdirSync(dir).filter((f) => f.endsWith(".snap")).sort()
const pendingOf = (dir: string) =>
  Effect.scoped(
    Effect.flatMap(DeliveryLog.open({ dir }), (l: Log) => Effect.map(l.pending, (p) => p.map((e) => e.message.body)))
  )

/** Open must refuse as corrupt naming `path`, and change nothing on disk. */
const refused = (dir: string, path: string) =>
  Effect.gen(function*() {
    const before = snapshotFiles(dir)
    const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir })))
    assert.strictEqual(e.reason, "corrupt", e.message)
    assert.strictEqual(e.path, path)
    assert.deepStrictEqual(snapshotFiles(dir), before, "nothing changed on disk")
    return e
  })

/** A log of `n` appends (every third acked) in small segments; returns the bodies still pending. */
const fill = (dir: string, n: number, options: { readonly compactAt?: number } = {}) =>
  Effect.scoped(
    Effect.gen(function*() {
      const log = yield* DeliveryLog.open({ dir, segmentBytes: 512 })
      for (let i = 0; i < n; i++) {
        const e = yield* log.append(msg(i))
        if (i % 3 === 0) yield* log.ack(e.id)
        if (i === options.compactAt) yield* log.compact
      }
      return (yield* log.pending).map((e) => e.message.body)
    })
  )

describe("fault: log files deleted, truncated, copied", () => {
  it.effect("the last segment deleted: refused as corrupt, nothing changed; put back, everything is there", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const pending = yield* fill(dir, 30)
      const last = join(dir, logs(dir).at(-1)!)
      const saved = fs.readFileSync(last)
      fs.rmSync(last)
      const e = yield* refused(dir, last)
      assert.include(e.message, "missing")
      fs.writeFileSync(last, saved, { mode: 0o600 })
      assert.deepStrictEqual(yield* pendingOf(dir), pending)
    }))

  it.effect("the last segment truncated to 0 bytes: refused as corrupt, nothing changed", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const pending = yield* fill(dir, 30)
      const last = join(dir, logs(dir).at(-1)!)
      const saved = fs.readFileSync(last)
      assert.isAbove(saved.length, 0)
      fs.truncateSync(last, 0)
      const e = yield* refused(dir, last)
      assert.include(e.message, "cut short")
      fs.writeFileSync(last, saved)
      assert.deepStrictEqual(yield* pendingOf(dir), pending)
    }))

  it.effect("a truncated middle segment blames itself (its file and offset), not the next file", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* fill(dir, 30)
      const files = logs(dir)
      assert.isAtLeast(files.length, 3)
      const middle = join(dir, files[1]!)
      const bounds = recordBoundaries(middle)
      const cut = bounds[bounds.length - 2]! // a whole record boundary: the file itself reads clean
      fs.truncateSync(middle, cut)
      const e = yield* refused(dir, middle)
      assert.include(e.message, `offset ${cut}`)
      assert.include(e.message, files[1]!)
    }))

  it.effect("a stale snapshot copied to a higher number: refused as corrupt, the good files stay", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const first = yield* fill(dir, 12, { compactAt: 11 })
      assert.isAbove(first.length, 0)
      const stale = fs.readFileSync(join(dir, snaps(dir)[0]!))
      const pending = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, segmentBytes: 512 })
          for (let i = 100; i < 130; i++) yield* log.append(msg(i))
          yield* log.compact
          for (let i = 130; i < 140; i++) yield* log.append(msg(i))
          return (yield* log.pending).map((e) => e.message.body)
        })
      )
      const copy = join(dir, "0000000000009999.snap")
      fs.writeFileSync(copy, stale, { mode: 0o600 })
      const e = yield* refused(dir, copy)
      assert.include(e.message, "stale or copied")
      fs.rmSync(copy)
      assert.deepStrictEqual(yield* pendingOf(dir), pending)
    }))

  it.effect("a fresh empty directory opens, and a torn tail after a crash is still cut (not refused)", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      fs.mkdirSync(dir, { mode: 0o700 })
      assert.deepStrictEqual(yield* pendingOf(dir), [])
      const pending = yield* fill(dir, 4)
      const last = join(dir, logs(dir).at(-1)!)
      fs.appendFileSync(last, Buffer.from([0, 0, 0, 9, 1, 2, 3])) // half a record, as a killed write leaves
      assert.deepStrictEqual(yield* pendingOf(dir), pending)
    }))
})
