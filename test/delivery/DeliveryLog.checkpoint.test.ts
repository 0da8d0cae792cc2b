/**
 * The CHECKPOINT a clean close writes, on real files: open uses it only while every file it covers
 * hashes as recorded, and recovery stays exactly as strict. A damaged, cut or stale checkpoint is
 * ignored (open replays and finds the same state); a flipped byte in a segment it covers still fails
 * open as corrupt, naming file and offset, changing nothing; records after it and a torn tail after
 * it are replayed and cut as without it; a damaged record behind an acked key fails the repeated
 * append as corrupt and writes nothing.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import { join } from "node:path"
import type { DeliveryLogError } from "../../src/delivery/errors.js"
import { DeliveryLog } from "../../src/delivery/index.js"
import { type Done, LogCore } from "../../src/delivery/logCore.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"
import { type ResolvedOptions, resolveOptions } from "../../src/delivery/validate.js"
import { copyLogDir, failure, recordBoundaries, snapshotFiles, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-checkpoint")
afterAll(tmp.rm)

const options = (dir: string): ResolvedOptions =>
  resolveOptions({ dir, fsync: "never", segmentBytes: 4096 }) as ResolvedOptions

const call = <A>(f: (done: Done<A>) => void): Promise<A> =>
  new Promise((resolve, reject) => f((e, v) => (e ? reject(e) : resolve(v as A))))

const copyDir = (from: string): string => copyLogDir(from, tmp.next())

const msg = (n: number, key?: string) => ({
  channel: "c",
  to: `r${n % 4}`,
  body: { n, text: "lorem ipsum ".repeat(3) },
  ...(key !== undefined ? { idempotencyKey: key } : {})
})

/** A log with keyed and plain entries acked, some pending, some with an attempt or an attempt started, some dead; closed. */
const build = async (dir: string) => {
  const { core } = LogCore.open(options(dir), 1000, {})
  const acked: Array<string> = []
  const keys: Record<string, string> = {}
  for (let i = 0; i < 120; i++) {
    const key = i % 3 === 0 ? undefined : `reply:session-${i % 7}:turn-${i}`
    const e = await call<DeliveryEntry>((d) => core.append(msg(i, key), 1000 + i, d, undefined))
    if (key !== undefined) keys[key] = e.id
    if (i % 5 === 4) await call((d) => core.attempt(e.id, { error: "down", nextAttemptAt: 5 }, d))
    if (i % 4 === 3 && i % 3 === 0) await call<void>((d) => core.markStarted(e.id, d))
    if (i % 11 === 10) await call<void>((d) => core.deadLetter(e.id, "gone", d))
    else if (i % 4 !== 3) {
      await call<void>((d) => core.ack(e.id, 1000 + i, d))
      acked.push(e.id)
    }
  }
  await core.close()
  return { acked, keys }
}

/** What the log in `dir` holds and remembers (asked on a copy: a repeated append of a forgotten key writes). */
const state = async (dir: string, known: { acked: Array<string>; keys: Record<string, string> }) => {
  const copy = copyDir(dir)
  const { core, notes } = LogCore.open(options(copy), 2000, {})
  try {
    // Whole entries: message, attempts, error, next attempt, maybeSent (the checkpoint holds most by place).
    const pending = core.list("pending")
    const dead = core.list("dead")
    const ids: Array<string> = []
    for (const id of known.acked) {
      if (await call<void>((d) => core.ack(id, 2000, d)).then(() => true, () => false)) ids.push(id)
    }
    const keys: Record<string, string> = {}
    for (const key of Object.keys(known.keys)) {
      keys[key] = (await call<DeliveryEntry>((d) => core.append(msg(0, key), 2000, d, undefined))).id
    }
    return { view: { pending, dead, ids, keys }, fromCheckpoint: notes.fromCheckpoint === true }
  } finally {
    await core.close()
  }
}

describe("DeliveryLog CHECKPOINT", () => {
  it("a log of mostly pending entries gets none at close (it would copy them and spare nothing)", async () => {
    const dir = tmp.next()
    const { core } = LogCore.open(options(dir), 1000, {})
    for (let i = 0; i < 50; i++) {
      const e = await call<DeliveryEntry>((d) =>
        core.append(msg(i, i % 2 === 0 ? `k${i}` : undefined), 1000, d, undefined)
      )
      if (i % 5 === 0) await call<void>((d) => core.ack(e.id, 1000, d))
    }
    await core.close()
    assert.isFalse(fs.existsSync(join(dir, "CHECKPOINT")))
  })

  it("a one-entry log's checkpoint is small (its rings' tables are not stored), and the next open uses it", async () => {
    const dir = tmp.next()
    const { core } = LogCore.open(options(dir), 1000, {})
    const e = await call<DeliveryEntry>((d) => core.append(msg(1, "reply:session-1:turn-1"), 1000, d, undefined))
    await call<void>((d) => core.ack(e.id, 1001, d))
    await core.close()
    // Was ~25 KB: three open-addressing tables of 2,048 cells for one id.
    const size = fs.statSync(join(dir, "CHECKPOINT")).size
    assert.isBelow(size, 1024, `${size} bytes`)
    const again = LogCore.open(options(dir), 2000, {})
    try {
      assert.isTrue(again.notes.fromCheckpoint)
      const same = await call<DeliveryEntry>((d) =>
        again.core.append(msg(2, "reply:session-1:turn-1"), 2000, d, undefined)
      )
      assert.strictEqual(same.id, e.id)
    } finally {
      await again.core.close()
    }
  })

  it("a clean close writes one (mode 0600) that the next open uses, with the same state as a replay", async () => {
    const dir = tmp.next()
    const known = await build(dir)
    assert.strictEqual(fs.statSync(join(dir, "CHECKPOINT")).mode & 0o777, 0o600)
    const used = await state(dir, known)
    assert.isTrue(used.fromCheckpoint)
    const noCheckpoint = copyDir(dir)
    fs.rmSync(join(noCheckpoint, "CHECKPOINT"))
    const replayed = await state(noCheckpoint, known)
    assert.isFalse(replayed.fromCheckpoint)
    assert.deepStrictEqual(used.view, replayed.view)
    assert.strictEqual(used.view.ids.length, known.acked.length, "every acked id is remembered")
    assert.deepStrictEqual(used.view.keys, known.keys, "every key returns its entry")
  })

  it("a flipped, cut or stale CHECKPOINT is ignored: open replays and finds the same state", async () => {
    const dir = tmp.next()
    const known = await build(dir)
    const want = (await state(dir, known)).view
    const flipped = copyDir(dir)
    const buf = fs.readFileSync(join(flipped, "CHECKPOINT"))
    buf[Math.floor(buf.length / 2)]! ^= 0x04
    fs.writeFileSync(join(flipped, "CHECKPOINT"), buf)
    const cut = copyDir(dir)
    fs.truncateSync(join(cut, "CHECKPOINT"), Math.floor(buf.length / 3))
    // Stale: the files changed under it (a compaction and more records, then the old checkpoint put back).
    const stale = copyDir(dir)
    const old = fs.readFileSync(join(stale, "CHECKPOINT"))
    const { core } = LogCore.open(options(stale), 1500, {})
    await core.compact()
    await core.close()
    fs.writeFileSync(join(stale, "CHECKPOINT"), old)
    for (const d of [flipped, cut, stale]) {
      const got = await state(d, known)
      assert.isFalse(got.fromCheckpoint, d)
      assert.deepStrictEqual(got.view, want, d)
    }
  })

  it("with a CHECKPOINT covering it, a flipped byte in a sealed segment still fails open as corrupt, naming file and offset, changing nothing", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      yield* Effect.promise(() => build(dir))
      assert.isTrue(fs.existsSync(join(dir, "CHECKPOINT")))
      const name = fs.readdirSync(dir).filter((f) => f.endsWith(".log")).sort()[0]!
      const bounds = recordBoundaries(join(dir, name))
      const buf = fs.readFileSync(join(dir, name))
      buf[bounds[3]! + 30]! ^= 0x01
      fs.writeFileSync(join(dir, name), buf)
      const before = snapshotFiles(dir)
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never", segmentBytes: 4096 })))
      assert.strictEqual(e.reason, "corrupt")
      assert.strictEqual(e.path, join(dir, name))
      assert.include(e.message, `at offset ${bounds[3]}`)
      assert.deepStrictEqual(snapshotFiles(dir), before, "open changed nothing on disk")
    }))

  it("records after the checkpoint (a crash before the next close) are replayed, and a torn tail after it is cut", async () => {
    const dir = tmp.next()
    const known = await build(dir)
    const { core, notes } = LogCore.open(options(dir), 1500, {})
    assert.isTrue(notes.fromCheckpoint === true)
    const later: Array<DeliveryEntry> = []
    for (let i = 0; i < 30; i++) {
      const key = `late-${i}`
      later.push(await call<DeliveryEntry>((d) => core.append(msg(i, key), 1500, d, undefined)))
      known.keys[key] = later[i]!.id
      if (i % 2 === 0) {
        await call<void>((d) => core.ack(later[i]!.id, 1500, d))
        known.acked.push(later[i]!.id)
      }
    }
    await call<void>((d) => core.flush(d))
    const crashed = copyDir(dir)
    await core.close()
    const clean = await state(dir, known)
    const afterCrash = await state(crashed, known)
    assert.isTrue(afterCrash.fromCheckpoint, "the checkpoint still covers a prefix of the files")
    assert.deepStrictEqual(afterCrash.view, clean.view)
    // A torn last record after the covered bytes: cut, the rest as before.
    const torn = copyDir(crashed)
    const last = fs.readdirSync(torn).filter((f) => f.endsWith(".log")).sort().pop()!
    const bounds = recordBoundaries(join(torn, last))
    fs.truncateSync(join(torn, last), bounds[bounds.length - 1]! - 3)
    const { core: reopened, notes: tornNotes } = LogCore.open(options(torn), 2000, {})
    assert.isTrue(tornNotes.fromCheckpoint === true)
    assert.strictEqual(tornNotes.truncated?.offset, bounds[bounds.length - 2])
    await reopened.close()
  })

  it("a damaged record behind an acked key fails the repeated append as corrupt and writes nothing", async () => {
    const dir = tmp.next()
    const { core } = LogCore.open(options(dir), 1000, {})
    const e = await call<DeliveryEntry>((d) => core.append(msg(1, "order-1"), 1000, d, undefined))
    await call<void>((d) => core.ack(e.id, 1000, d))
    const name = fs.readdirSync(dir).filter((f) => f.endsWith(".log"))[0]!
    const buf = fs.readFileSync(join(dir, name))
    buf[60]! ^= 0x20 // inside the append record's payload (the first record)
    fs.writeFileSync(join(dir, name), buf)
    const size = fs.statSync(join(dir, name)).size
    const err = await call<DeliveryEntry>((d) => core.append(msg(2, "order-1"), 1000, d, undefined)).then(
      () => assert.fail("expected corrupt"),
      (x: DeliveryLogError) => x
    )
    assert.strictEqual(err.reason, "corrupt")
    assert.include(err.message, "CRC-32")
    assert.strictEqual(fs.statSync(join(dir, name)).size, size, "nothing written")
    assert.strictEqual(core.stats().pending, 0)
    await core.close()
  })
})
