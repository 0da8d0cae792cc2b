/**
 * A log whose folder or lock is taken from under it (lockWatch.ts): an `rm -rf` of the folder, a
 * removed `LOCK`, a `LOCK` replaced by another live holder's. From the next check on (at most
 * `LOCK_CHECK_MS` later on the calls' clock) every write is refused with an error naming the folder,
 * health is failing, nothing more is written into the folder, and the log heals by taking the lock
 * anew once the folder is there (delivery.md, "Health"). Real files; the TestClock moves the checks
 * and the healer's backoff.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import * as fs from "node:fs"
import { join } from "node:path"
import { REOPEN_MS } from "../../src/delivery/healer.js"
import { DeliveryLog } from "../../src/delivery/index.js"
import { LOCK_CHECK_MS } from "../../src/delivery/lockWatch.js"
import { parseIdentity, selfIdentity } from "../../src/delivery/processIdentity.js"
import type { DeliveryLog as Log } from "../../src/delivery/types.js"
import { failure, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-gone")
afterAll(tmp.rm)

const msg = (text: string) => ({ channel: "c", to: "u", body: { text } })
const texts = (log: Log) => Effect.map(log.pending, (es) => es.map((e) => (e.message.body as { text: string }).text))
const ours = (dir: string) => parseIdentity(fs.readFileSync(join(dir, "LOCK"), "utf8"))?.pid === selfIdentity().pid

/** Until the log is healthy again: a re-open is real I/O, off the TestClock; bounded. */
const untilHealthy = (log: Log) =>
  Effect.gen(function*() {
    for (let turns = 0; (yield* log.health).status !== "ok"; turns++) {
      if (turns === 10_000) assert.fail("the log never healed")
      yield* Effect.promise(() => new Promise<void>((r) => setImmediate(r)))
    }
  })

/** The folder's files and their sizes and texts: what must not change once the lock is another's. */
const image = (dir: string) =>
  fs.readdirSync(dir).sort().map((f) => [f, fs.readFileSync(join(dir, f)).toString("base64")] as const)

describe("DeliveryLog: its folder or lock taken from under it", () => {
  it.effect("a deleted folder: writes refused from the next check, not made again by the log, healed once it is there again", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = tmp.next()
      const log = yield* DeliveryLog.open({ dir, fsync: "never" })
      yield* log.append(msg("one"))
      fs.rmSync(dir, { recursive: true })

      yield* TestClock.adjust(LOCK_CHECK_MS)
      const e = yield* failure(log.append(msg("two")))
      assert.strictEqual(e.reason, "io")
      assert.strictEqual(e.path, dir)
      assert.include(e.message, `folder ${dir} was deleted or moved while the log was open`)
      const health = yield* log.health
      assert.strictEqual(health.status, "failing")
      assert.strictEqual(health.status === "failing" ? health.error.message : "", e.message)

      // The re-opens back off and do not make an empty log in its place.
      yield* TestClock.adjust(REOPEN_MS.first)
      for (let i = 0; i < 50; i++) yield* Effect.promise(() => new Promise<void>((r) => setImmediate(r)))
      assert.isFalse(fs.existsSync(dir), "the folder is not made again by the log")
      assert.strictEqual((yield* failure(log.append(msg("three")))).message, e.message)

      // Made again (by the operator): the next re-open takes it, empty, with a lock of this process.
      fs.mkdirSync(dir)
      yield* TestClock.adjust(2 * REOPEN_MS.first)
      yield* untilHealthy(log)
      yield* log.append(msg("four"))
      assert.deepStrictEqual(yield* texts(log), ["four"])
      assert.isTrue(ours(dir))
    })))

  it.effect("a removed LOCK: refused until the lock is taken anew, and nothing on disk is lost", () =>
    Effect.scoped(Effect.gen(function*() {
      const dir = tmp.next()
      const log = yield* DeliveryLog.open({ dir, fsync: "never" })
      yield* log.append(msg("one"))
      yield* log.append(msg("two"))
      fs.rmSync(join(dir, "LOCK"))

      yield* TestClock.adjust(LOCK_CHECK_MS)
      const e = yield* failure(log.append(msg("three")))
      assert.strictEqual(e.reason, "io")
      assert.include(e.message, `lock file in ${dir} was removed or replaced`)

      yield* TestClock.adjust(REOPEN_MS.first)
      yield* untilHealthy(log)
      assert.isTrue(ours(dir), "the lock is taken anew")
      yield* log.append(msg("four"))
      assert.deepStrictEqual(yield* texts(log), ["one", "two", "four"])
    })))

  it.effect("a LOCK replaced by a live holder's: nothing more is written into the folder, and it stays refused", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const boot = fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim()
      const stat = fs.readFileSync("/proc/1/stat", "utf8")
      // pid 1 with its own start time: a holder that runs.
      const other = `1 ${stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19]} ${boot}\n`
      yield* Effect.scoped(Effect.gen(function*() {
        const log = yield* DeliveryLog.open({ dir, fsync: "never" })
        yield* log.append(msg("one"))
        fs.rmSync(join(dir, "LOCK"))
        fs.writeFileSync(join(dir, "LOCK"), other)
        const before = image(dir)

        yield* TestClock.adjust(LOCK_CHECK_MS)
        yield* failure(log.append(msg("two")))
        yield* TestClock.adjust(REOPEN_MS.first)
        for (let i = 0; i < 50; i++) yield* Effect.promise(() => new Promise<void>((r) => setImmediate(r)))
        const e = yield* failure(log.append(msg("three")))
        assert.strictEqual((yield* log.health).status, "failing")
        assert.include(e.message, "open in process 1")
        assert.deepStrictEqual(image(dir), before, "no CHECKPOINT, MANIFEST or record written after the lock went")
      }))
      // Closed: the other holder's lock is left as it was.
      assert.strictEqual(fs.readFileSync(join(dir, "LOCK"), "utf8"), other)
    }))
})
