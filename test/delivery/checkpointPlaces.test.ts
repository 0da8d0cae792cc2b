/**
 * The CHECKPOINT's live entries by place (format 3): an entry whose record's place is known is
 * written as its id and delivery state only, and read back on open from its record in the files the
 * checkpoint covers (checked as recovery checks a record, and holding that id). Open finds the state
 * a replay of every file finds: entries appended, replayed, moved into a snapshot by a compaction, or
 * restored from a checkpoint and checkpointed again. A checkpoint whose entry is not where it points
 * (another record, or a place never located) is ignored: open replays instead.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import { join } from "node:path"
import { type Done, LogCore } from "../../src/delivery/logCore.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"
import { type ResolvedOptions, resolveOptions } from "../../src/delivery/validate.js"
import { copyLogDir, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("checkpoint-places")
afterAll(tmp.rm)

const options = (dir: string): ResolvedOptions =>
  resolveOptions({ dir, fsync: "never", segmentBytes: 16 * 1024 }) as ResolvedOptions

const call = <A>(f: (done: Done<A>) => void): Promise<A> =>
  new Promise((resolve, reject) => f((e, v) => (e ? reject(e) : resolve(v as A))))

const msg = (n: number, key?: string) => ({
  channel: "c",
  to: `r${n % 4}`,
  body: { n, text: `${n % 9 === 0 ? "grüße, " : ""}${"lorem ipsum ".repeat(6)}` },
  ...(key !== undefined ? { idempotencyKey: key } : {})
})

/**
 * Append `n` entries to `core` (a third keyed) and ack most of them, so that a checkpoint pays; of
 * those left, some get an attempt (a non-ASCII error), some a started attempt, some are dead.
 */
const fill = async (core: LogCore, n: number, from = 0): Promise<Array<DeliveryEntry>> => {
  const left: Array<DeliveryEntry> = []
  for (let i = from; i < from + n; i++) {
    const e = await call<DeliveryEntry>((d) =>
      core.append(msg(i, i % 3 === 0 ? `reply:s-${i % 5}:t-${i}` : undefined), 1000 + i, d, undefined)
    )
    if (i % 4 !== 0) await call<void>((d) => core.ack(e.id, 1000 + i, d))
    else {
      if (i % 8 === 0) await call((d) => core.attempt(e.id, { error: `zeitüberschreitung ${i}`, nextAttemptAt: i }, d))
      if (i % 12 === 0) await call<void>((d) => core.markStarted(e.id, d))
      if (i % 20 === 0) await call<void>((d) => core.deadLetter(e.id, "gone", d))
      left.push(e)
    }
  }
  return left
}

/** What a copy of `dir` opens to: its entries whole, and whether the checkpoint carried the open. */
const opened = async (dir: string) => {
  const { core, notes } = LogCore.open(options(copyLogDir(dir, tmp.next())), 9000, {})
  try {
    return { entries: [...core.list("pending"), ...core.list("dead")], fromCheckpoint: notes.fromCheckpoint === true }
  } finally {
    await core.close()
  }
}

/** The same with the checkpoint removed: a replay of every file. */
const replayed = async (dir: string) => {
  const copy = copyLogDir(dir, tmp.next())
  fs.rmSync(join(copy, "CHECKPOINT"))
  const r = await opened(copy)
  assert.isFalse(r.fromCheckpoint)
  return r.entries
}

describe("CHECKPOINT: live entries by place", () => {
  it("holds a live entry as its id and state, and open reads the rest from its record: the replay's state", async () => {
    const dir = tmp.next()
    const { core } = LogCore.open(options(dir), 1000, {})
    const left = await fill(core, 400)
    await core.close()
    assert.strictEqual(fs.readFileSync(join(dir, "CHECKPOINT")).indexOf("lorem ipsum"), -1, "no message is copied")
    const got = await opened(dir)
    assert.isTrue(got.fromCheckpoint)
    assert.strictEqual(got.entries.length, left.length)
    assert.deepStrictEqual(got.entries, await replayed(dir))
    assert.isTrue(got.entries.some((e) => e.maybeSent === true && e.status === "pending"))
    assert.isTrue(got.entries.some((e) => e.lastError?.startsWith("zeitüberschreitung") === true))
  })

  it("entries moved into a snapshot, and entries restored from a checkpoint, are placed again", async () => {
    const dir = tmp.next()
    const first = LogCore.open(options(dir), 1000, {}).core
    await fill(first, 300)
    await first.compact()
    await fill(first, 100, 300)
    await first.close()
    const afterCompaction = await opened(dir)
    assert.isTrue(afterCompaction.fromCheckpoint)
    assert.deepStrictEqual(afterCompaction.entries, await replayed(dir))
    // Open from that checkpoint, change a little, close: the new checkpoint places the restored entries again.
    const { core, notes } = LogCore.open(options(dir), 2000, {})
    assert.isTrue(notes.fromCheckpoint === true)
    await fill(core, 60, 400)
    await core.close()
    const again = await opened(dir)
    assert.isTrue(again.fromCheckpoint)
    assert.deepStrictEqual(again.entries, await replayed(dir))
  })

  it("a checkpoint whose entry points at another record, or at a place never located, is ignored", async () => {
    for (const wrong of ["another record", "no place"] as const) {
      const dir = tmp.next()
      const { core } = LogCore.open(options(dir), 1000, {})
      const left = await fill(core, 200)
      const [a, b] = [core.state.live.get(left[1]!.id)!, core.state.live.get(left[2]!.id)!]
      a.pos = wrong === "another record" ? b.pos : Number.MAX_SAFE_INTEGER
      await core.close()
      assert.isTrue(fs.existsSync(join(dir, "CHECKPOINT")))
      const got = await opened(dir)
      assert.isFalse(got.fromCheckpoint, wrong)
      assert.strictEqual(got.entries.length, left.length)
      assert.deepStrictEqual(got.entries, await replayed(dir), wrong)
    }
  })
})
