/**
 * When a running checkpoint is due (checkpointer.ts, `dueAfter`): after a quarter of the last one's
 * size and at least 4 MiB (or a segment, if smaller), as before; and, with segments of 4 MiB or more,
 * not before the tail an open after a crash replays plus half the checkpoint it reads come to 20 MiB.
 */
import { assert, describe, it } from "@effect/vitest"
import { dueAfter } from "../../src/delivery/checkpointer.js"

const MiB = 1 << 20

describe("running checkpoint cadence", () => {
  it("a small window's checkpoint waits for the replay budget; a large one's for a quarter of its size", () => {
    const seg = 16 * MiB
    // No checkpoint yet (or a tiny one): 20 MiB of tail, the whole budget.
    assert.strictEqual(dueAfter(0, seg), 20 * MiB)
    // The kept-open bench's window (5–13 MB of rings): every 13.5–17.5 MiB instead of every 4 MiB.
    assert.strictEqual(dueAfter(5 * MiB, seg), 17.5 * MiB)
    assert.strictEqual(dueAfter(13 * MiB, seg), 13.5 * MiB)
    // Past ~27 MiB the floor and the quarter rule take over, as before.
    assert.strictEqual(dueAfter(30 * MiB, seg), 7.5 * MiB)
    assert.strictEqual(dueAfter(51 * MiB, seg), 51 * MiB / 4)
    assert.strictEqual(dueAfter(34 * MiB, seg), 8.5 * MiB)
    // Never below the floor of 4 MiB.
    assert.strictEqual(dueAfter(14 * MiB, seg), 13 * MiB)
    assert.isAtLeast(dueAfter(39 * MiB, seg), 4 * MiB)
  })

  it("with segments under 4 MiB (tests' logs) the rule is as before: a segment, or a quarter of the last one", () => {
    assert.strictEqual(dueAfter(0, 4096), 4096)
    assert.strictEqual(dueAfter(8192, 4096), 4096)
    assert.strictEqual(dueAfter(64 * 1024, 4096), 16 * 1024)
    assert.strictEqual(dueAfter(0, 2 * MiB), 2 * MiB)
  })
})
