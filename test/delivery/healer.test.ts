/**
 * The file log's healer on its own, under the TestClock: after a failed write it re-opens at once and
 * refuses writes for the backoff; a failure of the core it re-opened, in the background during that
 * backoff (a roll, a compaction), is healed too: the backoff's end re-opens again instead of resuming
 * writes on the failed core. Re-opens that keep failing back off 1 s, doubling to 30 s (delivery.md, "Health").
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Clock, Effect } from "effect"
import { TestClock } from "effect/testing"
import { vi } from "vitest"
import { DeliveryLogError } from "../../src/delivery/errors.js"
import { makeHealer, REOPEN_MS } from "../../src/delivery/healer.js"
import { LogCore } from "../../src/delivery/logCore.js"
import { resolveOptions } from "../../src/delivery/validate.js"
import type { ResolvedOptions } from "../../src/delivery/validate.js"
import { tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("healer")
afterAll(tmp.rm)

const io = (message: string) => new DeliveryLogError({ reason: "io", message, path: "test" })

/** Until `healed()`: a re-open closes and opens files (real I/O, not on the TestClock); bounded. */
const untilHealed = (healed: () => boolean) =>
  Effect.gen(function*() {
    for (let turns = 0; !healed(); turns++) {
      if (turns === 10_000) assert.fail("the healer never ended its episode")
      yield* Effect.promise(() => new Promise<void>((r) => setImmediate(r)))
    }
  })

describe("healer", () => {
  it.effect("a background failure of the re-opened core during the backoff is re-healed when the backoff ends", () =>
    Effect.scoped(Effect.gen(function*() {
      const o = resolveOptions({ dir: tmp.next(), fsync: "never" }) as ResolvedOptions
      const healer = yield* makeHealer(o, {}, LogCore.open(o, yield* Clock.currentTimeMillis, {}), () => {})
      yield* Effect.addFinalizer(() => healer.close)
      const opened = healer.core

      // A failed write: re-opened at once, writes refused for the first backoff.
      yield* healer.failed(io("EIO: the first failure"))
      const reopened = healer.core
      assert.notStrictEqual(reopened, opened)
      assert.isTrue(healer.failing)

      // The re-opened core's writer fails in the background during the backoff.
      reopened.onFailed(io("EIO: in the background"))
      yield* Effect.yieldNow
      assert.strictEqual(healer.refusal?.message, "EIO: in the background")

      yield* TestClock.adjust(REOPEN_MS.first)
      yield* untilHealed(() => !healer.failing)
      // The backoff ended: not resumed on the failed core, re-opened again.
      assert.notStrictEqual(healer.core, reopened)
      assert.deepStrictEqual(yield* healer.health, { status: "ok" })

      // Without a failure during the backoff the next episode resumes on its re-opened core.
      yield* healer.failed(io("EIO: another episode"))
      const third = healer.core
      yield* TestClock.adjust(2 * REOPEN_MS.first)
      yield* untilHealed(() => !healer.failing)
      assert.strictEqual(healer.core, third)
      assert.deepStrictEqual(yield* healer.health, { status: "ok" })
    })))

  it.effect("re-opens that keep failing back off 1 s, doubling to 30 s; health says failing with the latest error until one works", () =>
    Effect.scoped(Effect.gen(function*() {
      const o = resolveOptions({ dir: tmp.next(), fsync: "never" }) as ResolvedOptions
      const healer = yield* makeHealer(o, {}, LogCore.open(o, yield* Clock.currentTimeMillis, {}), () => {})
      yield* Effect.addFinalizer(() => healer.close)
      // The next 8 re-opens fail (a disk still failing); each records when it ran (the healer's clock).
      const real = LogCore.open.bind(LogCore)
      const at: Array<number> = []
      const open = vi.spyOn(LogCore, "open").mockImplementation((options, now, hooks, lock) => {
        at.push(now)
        if (at.length <= 8) throw io(`EIO: re-open ${at.length}`)
        return real(options, now, hooks, lock)
      })
      yield* Effect.addFinalizer(() => Effect.sync(() => open.mockRestore()))

      yield* healer.failed(io("EIO: the first failure"))
      assert.deepStrictEqual(at, [0], "the first re-open runs at once")
      const waits = [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000]
      for (const [i, wait] of waits.entries()) {
        const h = yield* healer.health
        assert.isTrue(h.status === "failing" && h.error.message === `EIO: re-open ${i + 1}`, `after re-open ${i + 1}`)
        yield* TestClock.adjust(wait - 1)
        yield* Effect.yieldNow
        assert.strictEqual(at.length, i + 1, `no re-open before ${wait} ms`)
        yield* TestClock.adjust(1)
        yield* untilHealed(() => at.length === i + 2)
      }
      yield* untilHealed(() => !healer.failing)
      assert.deepStrictEqual(at, [0, 1_000, 3_000, 7_000, 15_000, 31_000, 61_000, 91_000, 121_000])
      assert.deepStrictEqual(yield* healer.health, { status: "ok" })
    })))
})
