/**
 * What is specific to the file log: options, modes, the lock (with a real killed holder), segment
 * rolling, automatic compaction, closing (group commit and a failed sync: writes.test.ts).
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Option, Scope } from "effect"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import fsDefault from "node:fs"
import { syncBuiltinESMExports } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { DeliveryLog } from "../../src/delivery/index.js"
import { nodeArgs } from "../support/node.js"
import { failure, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-file")
afterAll(tmp.rm)

const msg = (i: number) => ({ channel: "c", to: `r${i % 4}`, body: { i } })

describe("DeliveryLog file store", () => {
  it.effect("options are validated: each bad option is reason invalid, naming the option", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const cases: Array<[Record<string, unknown>, string]> = [
        [{ segmentBytes: 0 }, "segmentBytes"],
        [{ segmentBytes: 1.5 }, "segmentBytes"],
        [{ maxRecordBytes: -1 }, "maxRecordBytes"],
        [{ maxRecordBytes: "big" }, "maxRecordBytes"],
        [{ maxRecordBytes: 2 ** 32 }, "maxRecordBytes"],
        [{ dedupeWindowMs: 0 }, "dedupeWindowMs"],
        [{ dedupeWindowMs: Number.NaN }, "dedupeWindowMs"],
        [{ fsync: "sometimes" }, "fsync"],
        [{ writes: "sometimes" }, "writes"],
        [{ dir: "" }, "dir"]
      ]
      for (const [bad, name] of cases) {
        const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, ...bad } as never)))
        assert.strictEqual(e.reason, "invalid")
        assert.include(e.message, `\`${name}\``)
        assert.match(e.message, /^Expected `/)
      }
      assert.isFalse(fs.existsSync(dir), "nothing was created for bad options")
    }))

  it.effect("files are created 0600 and a missing dir (recursively) 0700", () =>
    Effect.gen(function*() {
      const dir = join(tmp.next(), "a", "b")
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, segmentBytes: 100 })
          yield* Effect.forEach([1, 2, 3, 4], (i) => log.append(msg(i)))
          yield* log.compact
        })
      )
      assert.strictEqual(fs.statSync(dir).mode & 0o777, 0o700)
      const files = fs.readdirSync(dir)
      assert.isAbove(files.length, 1)
      for (const f of fs.readdirSync(dir)) assert.strictEqual(fs.statSync(join(dir, f)).mode & 0o777, 0o600, f)
    }))

  it.effect("single writer: a second open while the first holds the lock fails locked; closing releases it", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const scope = yield* Scope.make()
      yield* Scope.provide(scope)(DeliveryLog.open({ dir }))
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir })))
      assert.strictEqual(e.reason, "locked")
      assert.include(e.message, String(process.pid))
      yield* Scope.close(scope, Exit.void)
      assert.isFalse(fs.existsSync(join(dir, "LOCK")), "closing released the lock")
      yield* Effect.scoped(DeliveryLog.open({ dir }))
    }))

  it.live("single writer: a lock held by a live child fails locked; once the child is SIGKILLed its lock is taken over", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const fixture = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "holdLock.ts")
      const child = spawn(process.execPath, [...nodeArgs(fixture), dir], { stdio: ["ignore", "pipe", "inherit"] })
      yield* Effect.promise(
        () =>
          new Promise<void>((resolve, reject) => {
            child.stdout.setEncoding("utf8").on("data", (d: string) => d.includes("locked") && resolve())
            child.on("exit", () => reject(new Error("holder exited early")))
          })
      )
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir })))
      assert.strictEqual(e.reason, "locked")
      assert.include(e.message, String(child.pid))
      const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()))
      child.kill("SIGKILL")
      yield* Effect.promise(() => exited)
      assert.strictEqual(
        fs.readFileSync(join(dir, "LOCK"), "utf8").split(" ")[0],
        String(child.pid),
        "the dead holder's lock is still there"
      )
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir })
          assert.strictEqual(fs.readFileSync(join(dir, "LOCK"), "utf8").split(" ")[0], String(process.pid))
          yield* log.append(msg(1))
        })
      )
    }))

  it.effect("single writer: an old lock file without a pid (a crash between create and write) is taken over", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      fs.mkdirSync(dir, { recursive: true })
      fs.writeFileSync(join(dir, "LOCK"), "")
      const old = new Date(Date.now() - 60_000)
      fs.utimesSync(join(dir, "LOCK"), old, old)
      yield* Effect.scoped(DeliveryLog.open({ dir }))
    }))

  it.effect("append returns its message as replay will see it: a copy equal to JSON.parse of what was written (-0, own __proto__, toJSON)", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const bodies: Array<unknown> = [
        { a: -0, b: [1, "x", { c: null, d: [true, -0] }], e: "é\u2028" },
        JSON.parse("{\"__proto__\": {\"p\": 1}, \"q\": [[]]}"),
        { when: new Date(0), n: 1 },
        "plain text",
        -0
      ]
      const expected = bodies.map((b) => JSON.parse(JSON.stringify(b)))
      const appended = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, fsync: "never" })
          const es = yield* Effect.forEach(bodies, (body, i) => log.append({ channel: "c", to: `r${i}`, body })) // The caller changing its body afterwards changes neither the returned entry nor the log.
          ;(bodies[0] as { a: number }).a = 99
          for (let i = 0; i < es.length; i++) {
            assert.deepStrictEqual(es[i]!.message.body, expected[i], `body ${i}`)
            assert.deepStrictEqual(yield* log.get(es[i]!.id), Option.some(es[i]!))
          }
          assert.isTrue(
            Object.prototype.hasOwnProperty.call(es[1]!.message.body, "__proto__"),
            "own __proto__ stays data"
          )
          assert.isTrue(Object.is((es[0]!.message.body as { a: number }).a, 0), "-0 becomes 0, as in JSON")
          return es
        })
      )
      const reopened = yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (l) => l.pending))
      assert.deepStrictEqual(reopened, appended)
    }))

  it.effect("segments roll at segmentBytes and a record larger than a segment gets one of its own", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, fsync: "never", segmentBytes: 256 })
          for (let i = 0; i < 10; i++) yield* log.append(msg(i))
          yield* log.append({ channel: "c", to: "big", body: "x".repeat(1000) })
          const s = yield* log.stats
          assert.isAbove(s.segments, 3)
        })
      )
      for (const f of fs.readdirSync(dir).filter((f) => f.endsWith(".log"))) {
        const size = fs.statSync(join(dir, f)).size
        const big = fs.readFileSync(join(dir, f)).includes("xxxxxxxx")
        if (!big) assert.isAtMost(size, 256, f)
      }
      const pending = yield* Effect.scoped(
        Effect.flatMap(DeliveryLog.open({ dir, fsync: "never", segmentBytes: 256 }), (l) => l.pending)
      )
      assert.strictEqual(pending.length, 11)
    }))

  it.effect.each(["inline", "thread-pool"] as const)(
    "a new segment is synced, and its directory too, before the first record is written into it (writes: %s)",
    (writes) =>
      Effect.gen(function*() {
        const dir = tmp.next()
        const events: Array<string> = []
        const realWrite = fsDefault.write
        const realWriteSync = fsDefault.writeSync
        const realFsyncSync = fsDefault.fsyncSync
        const realOpenSync = fsDefault.openSync
        yield* Effect.acquireUseRelease(
          Effect.sync(() => {
            fsDefault.openSync = ((path: fs.PathLike, flags: fs.OpenMode, mode?: fs.Mode) => {
              const fd = realOpenSync(path, flags, mode)
              if (typeof flags === "number" && (flags & fs.constants.O_EXCL) !== 0 && String(path).endsWith(".log")) {
                events.push(`create:${fd}`)
              }
              return fd
            }) as typeof fsDefault.openSync
            fsDefault.write = ((...args: Array<unknown>) => {
              events.push(`write:${String(args[0])}`)
              return (realWrite as (...a: Array<unknown>) => void)(...args)
            }) as typeof fsDefault.write
            fsDefault.writeSync = ((...args: Array<unknown>) => {
              events.push(`write:${String(args[0])}`)
              return (realWriteSync as (...a: Array<unknown>) => number)(...args)
            }) as typeof fsDefault.writeSync
            fsDefault.fsyncSync = (fd: number) => {
              events.push(`fsync:${fd}`)
              realFsyncSync(fd)
            }
            syncBuiltinESMExports()
          }),
          () =>
            Effect.scoped(
              Effect.gen(function*() {
                const log = yield* DeliveryLog.open({ dir, segmentBytes: 200, writes })
                for (let i = 0; i < 6; i++) yield* log.append(msg(i))
              })
            ),
          () =>
            Effect.sync(() => {
              fsDefault.write = realWrite
              fsDefault.writeSync = realWriteSync
              fsDefault.fsyncSync = realFsyncSync
              fsDefault.openSync = realOpenSync
              syncBuiltinESMExports()
            })
        )
        // After each segment is created: an fsync of it, then one of another fd (the directory), then its first write.
        let checked = 0
        events.forEach((e, i) => {
          if (!e.startsWith("create:")) return
          const fd = e.slice(7)
          const rest = events.slice(i + 1)
          const firstWrite = rest.indexOf(`write:${fd}`)
          if (firstWrite < 0) return // the last one may stay empty
          const before = rest.slice(0, firstWrite)
          const own = before.indexOf(`fsync:${fd}`)
          assert.isAtLeast(own, 0, `segment fd ${fd} was synced before its first write`)
          assert.isTrue(
            before.slice(own + 1).some((x) => x.startsWith("fsync:") && x !== `fsync:${fd}`),
            "then the directory"
          )
          checked++
        })
        assert.isAbove(checked, 2, "several segments were created")
      })
  )

  it.effect("idempotency keys acked within the window survive compaction and a re-open", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const id = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, fsync: "never" })
          const e = yield* log.append({ channel: "c", to: "r", body: 1, idempotencyKey: "order-42" })
          yield* log.ack(e.id)
          yield* log.compact
          return e.id
        })
      )
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, fsync: "never" })
          const again = yield* log.append({ channel: "c", to: "r", body: 1, idempotencyKey: "order-42" })
          assert.strictEqual(again.id, id)
          assert.deepStrictEqual(yield* log.pending, [])
        })
      )
    }))

  it.effect("compaction runs by itself when dead weight passes the threshold and removes whole segments", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      let written = 0
      const keep = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, fsync: "never", segmentBytes: 2048 })
          const keep = yield* log.append(msg(-1))
          for (let i = 0; i < 400; i++) {
            const e = yield* log.append(msg(i))
            yield* log.ack(e.id)
          }
          written = (yield* log.stats).bytes
          return keep
        })
      )
      // Closing waited for the compaction in flight; no explicit compact was called.
      const files = fs.readdirSync(dir)
      const snaps = files.filter((f) => f.endsWith(".snap")).map((f) => Number.parseInt(f, 10))
      assert.isAbove(snaps.length, 0, "a snapshot was written by itself")
      const newest = Math.max(...snaps)
      const logs = files.filter((f) => f.endsWith(".log")).map((f) => Number.parseInt(f, 10))
      assert.isTrue(logs.every((n) => n > newest), "every segment before the snapshot was removed")
      assert.isBelow(newest, 44, "about 88 KB of records at 2 KiB a segment: about 43 segments without compaction")
      assert.isBelow(written, 400 * 200, "the log stays small")
      const pending = yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (l) => l.pending))
      assert.deepStrictEqual(pending.map((e) => e.id), [keep.id])
    }))

  it.effect("ack of an entry acked before a compaction and a re-open still succeeds (within the dedupe window)", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const id = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* DeliveryLog.open({ dir, fsync: "never" })
          const e = yield* log.append(msg(1))
          yield* log.ack(e.id)
          yield* log.compact
          return e.id
        })
      )
      yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (log) => log.ack(id)))
    }))

  it.effect("closing the Scope flushes: appends already handed to the log are durable after close", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const scope = yield* Scope.make()
      const log = yield* Scope.provide(scope)(DeliveryLog.open({ dir }))
      const fibers = yield* Effect.forEach(
        Array.from({ length: 20 }, (_, i) => i),
        (i) => Effect.forkChild(log.append(msg(i)))
      )
      yield* Effect.yieldNow
      yield* Scope.close(scope, Exit.void)
      const done = yield* Effect.forEach(fibers, (f) => Effect.exit(Fiber.join(f)))
      const ok = done.filter(Exit.isSuccess).length
      assert.isAbove(ok, 0)
      const pending = yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir }), (l) => l.pending))
      assert.strictEqual(pending.length, ok, "every append that succeeded is there after the close")
    }))
})
