/**
 * Crash tests of idempotency keys with real processes and real files: a child appending with keys
 * and acking with 16 concurrent producers is SIGKILLed at random moments, and compaction (which
 * moves acked keyed entries into its snapshot) is cut by SIGKILL at each of its steps. After every
 * kill the log re-opens (replaying, or from the CHECKPOINT of an earlier round's open for the bytes
 * it covers): everything the plain crash test checks, and every key whose append returned still
 * returns its entry, pending or acked, and adds nothing. The long version is `npm run crash:log`.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { check, checkKeys, COMPACTION_STEPS, Model, runRound } from "./fixtures/crashHarness.js"

const root = mkdtempSync(join(tmpdir(), "switchyard-log-keys-crash-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe("DeliveryLog idempotency keys through SIGKILL", () => {
  it("killed at random moments: every key whose append returned still returns its entry", async () => {
    const dir = join(root, "kill")
    const model = new Model()
    for (let round = 0; round < 4; round++) {
      const killAfter = 20 + Math.floor(Math.random() * 400)
      const r = await runRound(dir, round, model, killAfter, ["--segment-bytes", "16384", "--keys"])
      assert.strictEqual(r.signal, "SIGKILL", r.stderr)
      await check(dir, model)
      await checkKeys(dir, model)
    }
    assert.isAbove(model.keys.size, 40, "the children did append with keys")
    assert.isAbove(model.acked.size, 10, "the children did ack")
  }, 120_000)

  it("compaction cut by SIGKILL at each of its steps: acked keys still return their entries", async () => {
    const dir = join(root, "compact")
    const model = new Model()
    let round = 0
    for (const step of COMPACTION_STEPS) {
      const r = await runRound(dir, round++, model, 5_000, [
        "--segment-bytes",
        "4096",
        "--compact-every",
        "5",
        "--crash-at",
        step,
        "--keys"
      ])
      assert.strictEqual(r.signal, "SIGKILL", r.stderr)
      assert.isBelow(r.lines, 5_000, `the child reached step ${step} and killed itself`)
      await check(dir, model)
      assert.isAbove(await checkKeys(dir, model), 0)
    }
  }, 120_000)
})
