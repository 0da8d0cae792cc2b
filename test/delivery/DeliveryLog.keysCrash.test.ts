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
import { cutCompactionAtEachStep, killAtRandomMoments } from "../support/logCrashRounds.js"
import { checkKeys, Model } from "./fixtures/crashHarness.js"

const root = mkdtempSync(join(tmpdir(), "switchyard-log-keys-crash-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe("DeliveryLog idempotency keys through SIGKILL", () => {
  it("killed at random moments: every key whose append returned still returns its entry", async () => {
    const dir = join(root, "kill")
    const model = new Model()
    await killAtRandomMoments(dir, model, ["--segment-bytes", "16384", "--keys"], async () => {
      await checkKeys(dir, model)
    })
    assert.isAbove(model.keys.size, 40, "the children did append with keys")
    assert.isAbove(model.acked.size, 10, "the children did ack")
  }, 120_000)

  it("compaction cut by SIGKILL at each of its steps: acked keys still return their entries", async () => {
    const dir = join(root, "compact")
    const model = new Model()
    await cutCompactionAtEachStep(dir, model, ["--keys"], async () => {
      assert.isAbove(await checkKeys(dir, model), 0)
    })
  }, 120_000)
})
