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
import { cutCompactionAtEachStep, killAtRandomMoments } from "../support/logCrashRounds.js"
import { check, Model, runRound } from "./fixtures/crashHarness.js"

const root = mkdtempSync(join(tmpdir(), "switchyard-log-crash-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe("DeliveryLog crash safety (SIGKILL)", () => {
  it(
    "a producer killed at random moments: every returned append is there, nothing acked comes back, payloads intact",
    async () => {
      const model = new Model()
      await killAtRandomMoments(join(root, "kill"), model, ["--segment-bytes", "16384"])
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

  it("compaction interrupted by SIGKILL at each of its steps: nothing lost, nothing duplicated", async () => {
    const model = new Model()
    await cutCompactionAtEachStep(join(root, "compact"), model, [])
    assert.isAbove(model.appended.size, 40)
  }, 120_000)
})
