/**
 * Crash tests of what an open after a crash replays past the newest running CHECKPOINT, with real
 * processes and real files: a child appends with keys (16 producers, 4 MiB segments, so a checkpoint is
 * due every 4 MiB, more than the replay's read window) and acks each append hundreds of appends later (`--ack-later`), so that the tail
 * holds appends whose acks come after the replay's read window (1 MiB) moved on: their payloads are
 * copied aside (lazyAppends.ts), or, past 4 MiB of them, made into entries. It is SIGKILLed mid-run.
 * After every kill: every returned append is there and intact, nothing acked comes back, every key of
 * a returned append dedupes (from the checkpoint and its tail, and from a replay of every file), and the
 * state open finds from the checkpoint is the one a replay of every file finds.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import { join } from "node:path"
import { LogCore } from "../../src/delivery/logCore.js"
import { type ResolvedOptions, resolveOptions } from "../../src/delivery/validate.js"
import { check, checkKeys, Model, runRound } from "./fixtures/crashHarness.js"
import { copyLogDir, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-tail-crash")
afterAll(tmp.rm)

const SEGMENT = 4 << 20

/** The log in a copy of `dir` (its CHECKPOINT removed unless `withCheckpoint`): entries, acked ids still known. */
const opened = async (dir: string, model: Model, withCheckpoint: boolean) => {
  const copy = copyLogDir(dir, tmp.next())
  if (!withCheckpoint) fs.rmSync(join(copy, "CHECKPOINT"), { force: true })
  const o = resolveOptions({ dir: copy, fsync: "never", segmentBytes: SEGMENT }) as ResolvedOptions
  const { core, notes } = LogCore.open(o, Date.now(), {})
  try {
    const entries = [...core.list("pending"), ...core.list("dead")].map((e) =>
      [e.id, e.seq, e.status, e.attempts, e.maybeSent === true, e.message.idempotencyKey].join("/")
    )
    // An acked id is known while it is in the window: a second ack succeeds (and writes nothing new).
    const known = await Promise.all(
      [...model.acked].map((id) =>
        new Promise<boolean>((resolve) => core.ack(id, Date.now(), (e) => resolve(e === undefined)))
      )
    )
    return { entries, known: known.filter(Boolean).length, fromCheckpoint: notes.fromCheckpoint === true }
  } finally {
    await core.close()
  }
}

describe("DeliveryLog replay past a running CHECKPOINT, acks far behind their appends, through SIGKILL", () => {
  it("killed mid-run: nothing lost, every key dedupes, the checkpoint's state is the replay's", async () => {
    const dir = join(tmp.next(), "log")
    const model = new Model()
    let used = 0
    const rounds: ReadonlyArray<readonly [ackLater: number, lines: number]> = [[40, 80_000], [250, 80_000], [
      700,
      160_000
    ]]
    for (const [round, [later, lines]] of rounds.entries()) {
      const r = await runRound(dir, round, model, lines, [
        "--segment-bytes",
        String(SEGMENT),
        "--keys",
        "--no-sync",
        "--ack-later",
        String(later)
      ])
      assert.strictEqual(r.signal, "SIGKILL", r.stderr)
      const fromCheckpoint = await opened(dir, model, true)
      const replayed = await opened(dir, model, false)
      assert.isFalse(replayed.fromCheckpoint)
      if (fromCheckpoint.fromCheckpoint) used++
      assert.deepStrictEqual(fromCheckpoint.entries, replayed.entries, `round ${round}: the same entries`)
      assert.strictEqual(fromCheckpoint.known, model.acked.size, `round ${round}: every acked id known`)
      assert.strictEqual(replayed.known, model.acked.size)
      await check(dir, model)
      assert.isAbove(await checkKeys(dir, model), 0)
      const bare = copyLogDir(dir, tmp.next())
      fs.rmSync(join(bare, "CHECKPOINT"), { force: true })
      assert.isAbove(await checkKeys(bare, model), 0)
    }
    assert.isAtLeast(used, 2, "opens started from a running checkpoint")
    // The tail spans read windows: more than a segment written per round, and acks 40-700 appends behind.
    const bytes = fs.readdirSync(dir).filter((f) => f.endsWith(".log")).reduce(
      (n, f) => n + fs.statSync(join(dir, f)).size,
      0
    )
    assert.isAbove(bytes, 3 * SEGMENT)
    assert.isAbove(model.acked.size, 10_000, "the children did ack")
  }, 240_000)
})
