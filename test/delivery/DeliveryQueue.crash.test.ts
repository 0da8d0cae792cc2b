/**
 * DeliveryQueue under SIGKILL: a child process enqueues and delivers over the real file log and is
 * killed at random moments; the next child replays. At the end every enqueued entry was delivered at
 * least once; per recipient, deliveries are in seq order, and an entry is delivered again only when it
 * was the last one delivered to its recipient before a kill (its ack had not reached the disk).
 * The long version: `npm run crash:queue` (scripts/crash-delivery-queue.ts).
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { campaign } from "./fixtures/queueCrashHarness.js"

const root = mkdtempSync(join(tmpdir(), "switchyard-queue-crash-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe("DeliveryQueue crash", () => {
  it("SIGKILL at random moments loses nothing and keeps order per recipient (at least once)", async () => {
    const random = (lo: number, hi: number) => lo + Math.floor(Math.random() * (hi - lo + 1))
    const result = await campaign(join(root, "q"), [random(10, 70), random(1, 30), random(1, 30)])
    assert.isAtLeast(result.kills, 1, "at least one child was killed mid-way")
    assert.isAbove(result.enqueued, 0)
    assert.strictEqual(result.final, "done 0 0", "nothing pending or dead at the end")
  }, 60_000)
})
