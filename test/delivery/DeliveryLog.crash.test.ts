/**
 * Crash tests with real processes and real files: a child appending and acking with 16 concurrent
 * producers is SIGKILLed at random moments (a random count of returned calls), and compaction is
 * cut by SIGKILL at each of its steps. After every kill the log re-opens: every append that returned
 * is there with an intact payload, nothing acked comes back, nothing is there twice.
 * The long version is `npm run crash:log`.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { check, COMPACTION_STEPS, Model, runRound } from "./fixtures/crashHarness.js"

const root = mkdtempSync(join(tmpdir(), "switchyard-log-crash-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe("DeliveryLog crash safety (SIGKILL)", () => {
  it(
    "a producer killed at random moments: every returned append is there, nothing acked comes back, payloads intact",
    async () => {
      const dir = join(root, "kill")
      const model = new Model()
      for (let round = 0; round < 4; round++) {
        const killAfter = 20 + Math.floor(Math.random() * 400)
        const r = await runRound(dir, round, model, killAfter, ["--segment-bytes", "16384"])
        assert.strictEqual(r.signal, "SIGKILL", r.stderr)
        await check(dir, model)
      }
      assert.isAbove(model.appended.size, 40, "the children did append")
      assert.isAbove(model.acked.size, 10, "the children did ack")
    },
    120_000
  )

  it(
    "a parent that reads late (blocked 500 ms after ready) still sees every line: nothing is reported lost",
    async () => {
      // Through stdout the child ran ahead of the parent's reading and the kill dropped the lines it had
      // queued: an `A` line arrived, the `k` line of the ack that followed did not, and the acked entry
      // was reported lost (4 runs in 6). The report channel makes the child wait instead.
      const dir = join(root, "late")
      const model = new Model()
      const r = await runRound(dir, 0, model, 50, [], 500)
      assert.strictEqual(r.signal, "SIGKILL", r.stderr)
      await check(dir, model)
    },
    60_000
  )

  const steps = COMPACTION_STEPS
  it("compaction interrupted by SIGKILL at each of its steps: nothing lost, nothing duplicated", async () => {
    const dir = join(root, "compact")
    const model = new Model()
    let round = 0
    for (const step of steps) {
      const r = await runRound(dir, round++, model, 5_000, [
        "--segment-bytes",
        "4096",
        "--compact-every",
        "5",
        "--crash-at",
        step
      ])
      assert.strictEqual(r.signal, "SIGKILL", r.stderr)
      assert.isBelow(r.lines, 5_000, `the child reached step ${step} and killed itself`)
      await check(dir, model)
    }
    assert.isAbove(model.appended.size, 40)
  }, 120_000)
})
