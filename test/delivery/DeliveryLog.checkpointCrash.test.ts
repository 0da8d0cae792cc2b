/**
 * Crash tests of the CHECKPOINT written while the log runs, with real processes and real files: a
 * child appending with keys and acking (16 producers, fsync "always", 4 KiB segments, so that
 * checkpoints come often) SIGKILLs itself at each step of writing one (captured, temporary file
 * written and synced, renamed). After every kill the log re-opens and is checked against the model
 * (every returned append there and intact, nothing acked back, every key of a returned append still
 * dedupes), and the state open finds from the checkpoint is the state a replay of every file finds.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import { join } from "node:path"
import { type Done, LogCore } from "../../src/delivery/logCore.js"
import { type ResolvedOptions, resolveOptions } from "../../src/delivery/validate.js"
import { check, checkKeys, CHECKPOINT_STEPS, Model, runRound } from "./fixtures/crashHarness.js"
import { copyLogDir, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-checkpoint-crash")
afterAll(tmp.rm)

const call = <A>(f: (done: Done<A>) => void): Promise<A> =>
  new Promise((resolve, reject) => f((e, v) => (e ? reject(e) : resolve(v as A))))

/** What a copy of `dir` opens to: the live entries, and which of the model's acked ids are still known. */
const view = async (dir: string, model: Model, withCheckpoint: boolean) => {
  const copy = copyLogDir(dir, tmp.next())
  if (!withCheckpoint) fs.rmSync(join(copy, "CHECKPOINT"), { force: true })
  const o = resolveOptions({ dir: copy, fsync: "never", segmentBytes: 4096 }) as ResolvedOptions
  const { core, notes } = LogCore.open(o, Date.now(), {})
  try {
    const live = ["pending", "dead"].flatMap((s) =>
      core.list(s as "pending" | "dead").map((e) => `${e.id}/${e.status}/${e.attempts}/${e.maybeSent === true}`)
    )
    const known: Array<string> = []
    for (const id of model.acked) {
      if (await call<void>((d) => core.ack(id, Date.now(), d)).then(() => true, () => false)) known.push(id)
    }
    return { view: { live, known, stats: core.stats().pending }, fromCheckpoint: notes.fromCheckpoint === true }
  } finally {
    await core.close()
  }
}

describe("DeliveryLog running CHECKPOINT through SIGKILL", () => {
  it("killed at each step of writing one: nothing lost, keys dedupe, and its state is the replay's", async () => {
    const dir = join(tmp.next(), "log")
    const model = new Model()
    let round = 0
    let used = 0
    for (const step of [...CHECKPOINT_STEPS, ...CHECKPOINT_STEPS]) {
      const r = await runRound(dir, round++, model, 5_000, [
        "--segment-bytes",
        "4096",
        "--ack-most",
        "--keys",
        "--crash-at",
        step
      ])
      assert.strictEqual(r.signal, "SIGKILL", r.stderr)
      assert.isBelow(r.lines, 5_000, `the child reached step ${step} and killed itself`)
      const fromCheckpoint = await view(dir, model, true)
      if (step === "checkpoint-renamed") {
        assert.isTrue(fromCheckpoint.fromCheckpoint, "the checkpoint just renamed is used")
      }
      if (fromCheckpoint.fromCheckpoint) used++
      const replayed = await view(dir, model, false)
      assert.isFalse(replayed.fromCheckpoint)
      assert.deepStrictEqual(fromCheckpoint.view, replayed.view, `after a kill at ${step}`)
      await check(dir, model)
      assert.isAbove(await checkKeys(dir, model), 0)
    }
    assert.isAtLeast(used, 2)
    assert.isAbove(model.acked.size, 20, "the children did ack")
  }, 180_000)
})
