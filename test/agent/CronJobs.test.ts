/** Cron jobs: validation, the chatbot's `--cron` flag, and the schedule loop on the TestClock. */
import { assert, describe, it } from "@effect/vitest"
import { Cron, Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { runSchedule } from "../../src/agent/CronJobs.js"
import { parseCronFlag, parseJobs } from "../../src/agent/index.js"

describe("CronJobs", () => {
  it.effect("a 6-field schedule (seconds first) fires at every due second, once each", () =>
    Effect.gen(function*() {
      let ticks = 0
      const fiber = yield* Effect.forkChild(
        runSchedule(Cron.parseUnsafe("*/2 * * * * *"), Effect.sync(() => void ticks++))
      )
      yield* TestClock.adjust(1_999)
      assert.strictEqual(ticks, 0)
      yield* TestClock.adjust(1)
      assert.strictEqual(ticks, 1)
      yield* TestClock.adjust(10_000)
      assert.strictEqual(ticks, 6)
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("a 5-field schedule fires on the minute", () =>
    Effect.gen(function*() {
      let ticks = 0
      const fiber = yield* Effect.forkChild(
        runSchedule(Cron.parseUnsafe("*/5 * * * *"), Effect.sync(() => void ticks++))
      )
      yield* TestClock.adjust(4 * 60_000)
      assert.strictEqual(ticks, 0)
      yield* TestClock.adjust(60_000)
      assert.strictEqual(ticks, 1)
      yield* TestClock.adjust(10 * 60_000)
      assert.strictEqual(ticks, 3)
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("a schedule in a time zone fires at that zone's wall time", () =>
    Effect.gen(function*() {
      let ticks = 0
      // 09:00 in Tokyo (UTC+9) is 00:00 UTC.
      const [job] = yield* parseJobs([{ name: "tokyo", schedule: "0 9 * * *", prompt: "p", timeZone: "Asia/Tokyo" }])
      const fiber = yield* Effect.forkChild(runSchedule(job!.cron, Effect.sync(() => void ticks++)))
      yield* TestClock.adjust(24 * 3_600_000 - 1)
      assert.strictEqual(ticks, 0)
      yield* TestClock.adjust(1)
      assert.strictEqual(ticks, 1)
      yield* Fiber.interrupt(fiber)
    }))

  it.effect("parseJobs names the first bad field", () =>
    Effect.gen(function*() {
      const cases: Array<[Parameters<typeof parseJobs>[0], string]> = [
        [[{ name: "", schedule: "* * * * *", prompt: "p" }], "cron[0].name"],
        [[{ name: "a", schedule: "* * * *", prompt: "p" }], "cron[0].schedule"],
        [[{ name: "a", schedule: "* * * * *", prompt: " " }], "cron[0].prompt"],
        [[{ name: "a", schedule: "* * * * *", prompt: "p", timeZone: "Mars/Olympus" }], "cron[0].schedule"],
        [
          [{ name: "a", schedule: "* * * * *", prompt: "p" }, { name: "a", schedule: "* * * * *", prompt: "q" }],
          "cron[1].name"
        ]
      ]
      for (const [jobs, field] of cases) {
        const error = yield* Effect.flip(parseJobs(jobs))
        assert.strictEqual(error.field, field)
        assert.match(error.message, /^Expected /)
      }
    }))

  it.effect("--cron takes `<expression>|<prompt>` and names jobs cron-1, cron-2, ...", () =>
    Effect.sync(() => {
      assert.deepStrictEqual(parseCronFlag("*/1 * * * * *|report", 1), {
        name: "cron-1",
        schedule: "*/1 * * * * *",
        prompt: "report"
      })
      assert.deepStrictEqual(parseCronFlag(" 0 9 * * 1-5 | standup | notes", 2), {
        name: "cron-2",
        schedule: "0 9 * * 1-5",
        prompt: "standup | notes"
      })
      assert.include(parseCronFlag("* * * * *", 1) as string, "<expression>|<prompt>")
      assert.include(parseCronFlag("nope|x", 1) as string, "cron expression")
      assert.include(parseCronFlag("* * * * *|", 1) as string, "prompt")
    }))
})
