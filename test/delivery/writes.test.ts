/**
 * `writes`: which thread makes the writer's durable writes. Inline (the default while the disk answers)
 * they are synchronous `fs.writeSync` calls on the O_DSYNC segment, at the end of the tick that batched
 * them; on the thread pool they are `fs.write`. Both keep group commit and the failure rule; `"auto"`
 * leaves the event loop for the thread pool after one slow write (a fake clock says how long it took).
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import fsDefault from "node:fs"
import { syncBuiltinESMExports } from "node:module"
import {
  GroupCommitWriter,
  IDLE_WRITES_TO_INLINE,
  INLINE_MIN_CALLS,
  INLINE_RUN,
  POOL_SPELL_MS,
  SLOW_WRITE_MS
} from "../../src/delivery/groupCommit.js"
import { DeliveryLog } from "../../src/delivery/index.js"
import { createSegment } from "../../src/delivery/segment.js"
import { failure, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-writes")
afterAll(tmp.rm)

const msg = (i: number) => ({ channel: "c", to: `r${i % 4}`, body: { i } })

/** Is descriptor `fd` of this process open with O_DSYNC (its flags as Linux shows them)? */
const dsync = (fd: number): boolean => {
  const flags = /^flags:\s+([0-7]+)$/m.exec(fs.readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"))
  return flags !== null && (parseInt(flags[1]!, 8) & fs.constants.O_DSYNC) !== 0
}

type WriteSync = (fd: number, buf: Buffer, offset: number, length: number, position: number) => number
type Write = (...args: Array<unknown>) => void

/** Replace `fs.writeSync` and `fs.write` (as the log sees them) while `f` runs. */
const patched = <A, E, R>(
  replace: { writeSync?: (original: WriteSync) => WriteSync; write?: (original: Write) => Write },
  f: Effect.Effect<A, E, R>
): Effect.Effect<A, E, R> =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const originals = { writeSync: fsDefault.writeSync, write: fsDefault.write }
      if (replace.writeSync) {
        fsDefault.writeSync = replace.writeSync(
          originals.writeSync as unknown as WriteSync
        ) as typeof fsDefault.writeSync
      }
      if (replace.write) fsDefault.write = replace.write(originals.write as unknown as Write) as typeof fsDefault.write
      syncBuiltinESMExports()
      return originals
    }),
    () => f,
    (originals) =>
      Effect.sync(() => {
        fsDefault.writeSync = originals.writeSync
        fsDefault.write = originals.write
        syncBuiltinESMExports()
      })
  )

/**
 * Count the writes on O_DSYNC descriptors by thread, `inline` (writeSync) and `pool` (write, not
 * counting the zeros filled ahead), and note "synced" in `events` when each returns.
 */
const counting = (events: Array<string>) => {
  const n = { inline: 0, pool: 0 }
  return {
    n,
    replace: {
      writeSync: (original: WriteSync): WriteSync => (fd, buf, offset, length, position) => {
        if (!dsync(fd)) return original(fd, buf, offset, length, position)
        n.inline++
        const written = original(fd, buf, offset, length, position)
        events.push("synced")
        return written
      },
      write: (original: Write): Write => (...args) => {
        const fd = args[0] as number
        const zeros = (args[1] as Buffer)[args[2] as number] === 0
        if (!dsync(fd) || zeros) return original(...args)
        n.pool++
        const cb = args[args.length - 1] as (...r: Array<unknown>) => void
        original(...args.slice(0, -1), (...r: Array<unknown>) => {
          events.push("synced")
          cb(...r)
        })
      }
    }
  }
}

/** The failure of a durable write: its bytes reach the file, its flush fails (an O_DSYNC write reports it as the write's error). */
const failingSync = {
  writeSync: (original: WriteSync): WriteSync => (fd, buf, offset, length, position) => {
    const n = original(fd, buf, offset, length, position)
    if (dsync(fd)) throw eio()
    return n
  },
  write: (original: Write): Write => (...args) => {
    const cb = args[args.length - 1] as (err: unknown, n: number) => void
    original(...args.slice(0, -1), (err: unknown, n: number) => {
      if (err !== null || !dsync(args[0] as number)) return cb(err, n)
      cb(eio(), 0)
    })
  }
}
const eio = (): NodeJS.ErrnoException => Object.assign(new Error("EIO: i/o error, write"), { code: "EIO" })

describe("DeliveryLog writes", () => {
  it.effect.each(["inline", "thread-pool"] as const)(
    "writes %s: 64 overlapping appends share few durable writes, on the thread the mode says; none returns before one covering it returned",
    (writes) =>
      Effect.gen(function*() {
        const dir = tmp.next()
        const events: Array<string> = []
        const c = counting(events)
        yield* patched(
          c.replace,
          Effect.scoped(
            Effect.flatMap(DeliveryLog.open({ dir, writes }), (log) =>
              Effect.forEach(
                Array.from({ length: 64 }, (_, i) => i),
                (i) => Effect.tap(log.append(msg(i)), () => Effect.sync(() => events.push("returned"))),
                { concurrency: "unbounded", discard: true }
              ))
          )
        )
        assert.strictEqual(events.filter((e) => e === "returned").length, 64)
        const [used, unused] = writes === "thread-pool" ? [c.n.pool, c.n.inline] : [c.n.inline, c.n.pool]
        assert.isAtLeast(used, 1)
        assert.isAtMost(used, 4, `64 appends took ${used} durable writes`)
        assert.strictEqual(unused, 0, "no record was written on the other thread")
        assert.strictEqual(events[0], "synced", "the first append returned only after a durable write")
        const pending = yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir }), (l) => l.pending))
        assert.strictEqual(pending.length, 64, "a re-open reads what was written")
      })
  )

  it.effect.each(["inline", "thread-pool"] as const)(
    "writes %s: a failed durable write fails every call it covered with io, the log then refuses writes, and a re-open recovers",
    (writes) =>
      Effect.gen(function*() {
        const dir = tmp.next()
        yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir }), (log) => log.append(msg(0))))
        const results = yield* patched(
          failingSync,
          Effect.scoped(
            Effect.gen(function*() {
              const log = yield* DeliveryLog.open({ dir, writes })
              const covered = yield* Effect.forEach(
                Array.from({ length: 40 }, (_, i) => i + 1),
                (i) => failure(log.append(msg(i))),
                { concurrency: "unbounded" }
              )
              const later = yield* failure(log.append(msg(99)))
              const ack = yield* failure(log.ack("whatever"))
              return { covered, later, ack }
            })
          )
        )
        for (const e of results.covered) {
          assert.strictEqual(e.reason, "io")
          assert.include(e.message, "EIO")
        }
        assert.strictEqual(results.later.reason, "io")
        assert.strictEqual(results.ack.reason, "io")
        // The flush failed but the bytes may be in the file: they come back or not, the first entry stays.
        yield* Effect.scoped(
          Effect.gen(function*() {
            const log = yield* DeliveryLog.open({ dir })
            assert.deepStrictEqual((yield* log.pending)[0]!.message.body, { i: 0 })
            yield* log.append(msg(100))
            assert.deepStrictEqual((yield* log.pending).at(-1)!.message.body, { i: 100 })
          })
        )
      })
  )

  it.effect("auto: big batches go inline once the thread pool's writes had nothing arriving meanwhile, small ones and overlapped ones stay on the pool, a slow inline write sends all to the pool for POOL_SPELL_MS", () =>
    Effect.gen(function*() {
      assert.strictEqual(IDLE_WRITES_TO_INLINE, 2, "the trace below is written for 2")
      const dir = tmp.next()
      fs.mkdirSync(dir, { mode: 0o700 })
      // The writer's clock: a write on the segment "takes" `cost` ms of it.
      let clock = 1_000
      let cost = 0
      // While a write is on the thread pool, a call arrives (another fiber's).
      let arriveMeanwhile = false
      const trace: Array<string> = []
      const { fd } = createSegment(dir, 1, true)
      const writer = new GroupCommitWriter(
        dir,
        { number: 1, fd, size: 0, length: 0 },
        1 << 24,
        true,
        { onRoll: () => {}, onWritten: () => {} },
        "auto",
        () => clock
      )
      let records = 0
      const push = (byte: number, done: (err: Error | undefined) => void) => {
        const at = writer.reserve(16)
        writer.buffer.fill(byte, at, at + 16)
        records++
        writer.push(done)
      }
      const record = (byte: number) =>
        Effect.callback<void, Error>((resume) => push(byte, (err) => resume(err ? Effect.fail(err) : Effect.void)))
      // One batch of `calls` records, pushed in one tick.
      const batch = (calls = INLINE_MIN_CALLS) =>
        Effect.forEach(Array.from({ length: calls }, (_, i) => 1 + (i % 200)), record, {
          concurrency: "unbounded",
          discard: true
        })
      yield* patched(
        {
          writeSync: (original) => (wfd, buf, offset, length, position) => {
            if (wfd === fd) {
              clock += cost
              trace.push(`inline:${length / 16}`)
            }
            return original(wfd, buf, offset, length, position)
          },
          write: (original) => (...args) => {
            if (args[0] === fd && (args[1] as Buffer)[args[2] as number] !== 0) {
              trace.push(`pool:${(args[3] as number) / 16}`)
              if (arriveMeanwhile) push(250, () => {})
            }
            original(...args)
          }
        },
        Effect.gen(function*() {
          yield* batch(INLINE_MIN_CALLS - 1) // small: the pool, and it does not count
          yield* batch() // big, on the pool, nothing arrived meanwhile: 1
          yield* batch() // 2: the next big batches go inline
          yield* batch() // inline
          cost = SLOW_WRITE_MS + 1 // the disk stalls: this inline write takes too long
          yield* batch()
          cost = 0
          yield* batch() // on the pool for POOL_SPELL_MS, however idle
          yield* batch()
          yield* batch()
          clock += POOL_SPELL_MS
          yield* batch() // inline again
          cost = SLOW_WRITE_MS // not longer than the limit: stays inline
          for (let i = 0; i < INLINE_RUN - 1; i++) yield* batch()
          cost = 0
          // The run is over: the next big batch goes to the pool to look, and a call arrives meanwhile
          // (it joins the next batch).
          arriveMeanwhile = true
          yield* batch()
          yield* batch()
          arriveMeanwhile = false
          yield* batch() // overlapped before: stays on the pool; idle now: 1
          yield* batch() // 2
          yield* batch() // inline
        })
      )
      yield* Effect.promise(() => writer.close())
      const n = INLINE_MIN_CALLS
      assert.deepStrictEqual(trace, [
        `pool:${n - 1}`,
        `pool:${n}`,
        `pool:${n}`,
        `inline:${n}`,
        `inline:${n}`,
        `pool:${n}`,
        `pool:${n}`,
        `pool:${n}`,
        ...Array(INLINE_RUN).fill(`inline:${n}`),
        `pool:${n}`,
        `pool:${n + 1}`,
        `pool:${n + 1}`,
        `pool:${n}`,
        `inline:${n}`
      ])
      // Every record reached the file whole, in the order pushed (the arrived ones among them).
      const bytes = fs.readFileSync(`${dir}/${fs.readdirSync(dir).find((f) => f.endsWith(".log"))!}`)
      assert.isAtLeast(bytes.length, records * 16)
      for (let r = 0; r < records; r++) {
        const block = bytes.subarray(r * 16, r * 16 + 16)
        assert.isTrue(block.every((b) => b === block[0] && b !== 0), `record ${r} whole`)
      }
    }))

  it.effect("inline: the event loop turns between batches, so I/O waiting for it (a running checkpoint's read-back) is not held until producers that append again at once pause", () =>
    Effect.promise(async () => {
      const dir = tmp.next()
      fs.mkdirSync(dir, { mode: 0o700 })
      const { fd } = createSegment(dir, 1, false)
      let batches = 0
      const writer = new GroupCommitWriter(
        dir,
        { number: 1, fd, size: 0, length: 0 },
        1 << 24,
        false,
        { onRoll: () => {}, onWritten: () => void batches++ },
        "inline"
      )
      // 8 producers, each appending again as soon as its call completed (as a fiber resumed by it does),
      // 100 records each: the writer always has a batch waiting.
      let left = 800
      const all = new Promise<void>((resolve) => {
        const push = (): void => {
          const at = writer.reserve(16)
          writer.buffer.fill(7, at, at + 16)
          writer.push(() => {
            if (--left === 0) resolve()
            else if (left >= 8) push()
          })
        }
        for (let p = 0; p < 8; p++) push()
      })
      // A callback waiting for the event loop, as the thread pool's answers to a checkpoint's reads do.
      const turned = new Promise<number>((resolve) => setImmediate(() => resolve(batches)))
      const batchesAtTurn = await turned
      await all
      await writer.close()
      assert.isAtLeast(batches, 50, `${batches} batches`)
      assert.isAtMost(batchesAtTurn, 2, `the event loop turned only after ${batchesAtTurn} of ${batches} batches`)
    }))
})
