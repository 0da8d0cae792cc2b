/**
 * The rounds the delivery log's SIGKILL tests share (`DeliveryLog.crash` and
 * `DeliveryLog.keysCrash`): a producer killed at random moments, and compaction cut by SIGKILL at
 * each of its steps. After every kill the log re-opens and `check` (crashHarness.ts) runs: every
 * append that returned is there with an intact payload, nothing acked comes back, nothing is there
 * twice; then the test's own `after` check of that round.
 */
import { assert } from "@effect/vitest"
import type { CompactionStep } from "../../src/delivery/compaction.js"
import { check, COMPACTION_STEPS, runRound } from "../delivery/fixtures/crashHarness.js"
import type { Model } from "../delivery/fixtures/crashHarness.js"

/**
 * Four children over `dir`, each SIGKILLed after a random 20–419 report lines (the producer's
 * `args`: segment size, `--keys`, ...); the checks after each kill.
 */
export const killAtRandomMoments = async (
  dir: string,
  model: Model,
  args: ReadonlyArray<string>,
  after?: () => Promise<void>
): Promise<void> => {
  for (let round = 0; round < 4; round++) {
    const killAfter = 20 + Math.floor(Math.random() * 400)
    const r = await runRound(dir, round, model, killAfter, args)
    assert.strictEqual(r.signal, "SIGKILL", r.stderr)
    await check(dir, model)
    if (after !== undefined) await after()
  }
}

/**
 * One child per step of a compaction (4 KiB segments, a compaction every 5 acks), each killing
 * itself by SIGKILL at that step (`--crash-at`, then the producer's `args`); the checks after each.
 */
export const cutCompactionAtEachStep = async (
  dir: string,
  model: Model,
  args: ReadonlyArray<string>,
  after?: (step: CompactionStep) => Promise<void>
): Promise<void> => {
  let round = 0
  for (const step of COMPACTION_STEPS) {
    const r = await runRound(dir, round++, model, 5_000, [
      "--segment-bytes",
      "4096",
      "--compact-every",
      "5",
      "--crash-at",
      step,
      ...args
    ])
    assert.strictEqual(r.signal, "SIGKILL", r.stderr)
    assert.isBelow(r.lines, 5_000, `the child reached step ${step} and killed itself`)
    await check(dir, model)
    if (after !== undefined) await after(step)
  }
}
