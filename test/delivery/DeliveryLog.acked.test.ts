/**
 * What the file log remembers of acked entries (ids for a repeated `ack`, idempotency keys for a
 * repeated `append`), on real files, against a model: random appends (keyed from a small pool, and
 * plain), acks, failed attempts, attempt marks, dead letters and requeues, compactions, time passing
 * a short dedupe window, clean re-opens (from the CHECKPOINT) and crashes (the files copied while the
 * log is open). At the end, and in every copy, the remembered ids and keys are exactly the model's:
 * re-opened from the checkpoint, without it, and from a crash image. With a digest that makes every
 * key collide, no distinct message is ever taken for another.
 *
 * Bounded for a loaded CI machine (test/support/property.ts): a time budget well below the timeout, the
 * seed printed on a failure (`FC_SEED=<seed>` replays), and a run stops at its next step once the test
 * is over or timed out (its files closed, its temp dirs removed). The bulk prelude (up to 120 keyed
 * appends and acks: up to 18 segments of 2 KiB, rolls and whole-segment removal; the id ring's growth past
 * its 1024 slots is keyedWindow.test.ts's) and the final questions go to the log concurrently (group
 * commit: a few writes, not one per call; a question is asked on a copy only when another follows), and
 * each property counts what its runs went through (compactions, re-opens from a CHECKPOINT, crash
 * images, ids past the window and still in it) and checks it was all reached.
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import * as fs from "node:fs"
import { join } from "node:path"
import type { CompactionHooks } from "../../src/delivery/compaction.js"
import type { DeliveryLogError } from "../../src/delivery/errors.js"
import type { KeyDigest } from "../../src/delivery/keyDigest.js"
import { type Done, LogCore } from "../../src/delivery/logCore.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"
import { type ResolvedOptions, resolveOptions } from "../../src/delivery/validate.js"
import { checkBounded } from "../support/property.js"
import { copyLogDir, tempRoot } from "./fixtures/files.js"

const WINDOW = 1_000

const options = (dir: string): ResolvedOptions =>
  resolveOptions({ dir, fsync: "never", segmentBytes: 2048, dedupeWindowMs: WINDOW }) as ResolvedOptions

const call = <A>(f: (done: Done<A>) => void): Promise<A> =>
  new Promise((resolve, reject) => f((e, v) => (e ? reject(e) : resolve(v as A))))

const open = (dir: string, now: number, hooks: CompactionHooks) => LogCore.open(options(dir), now, hooks)

const message = (n: number, key?: string) => ({
  channel: "c",
  to: `r${n % 3}`,
  body: { n, pad: "x".repeat(n % 40) },
  ...(key !== undefined ? { idempotencyKey: key } : {})
})

/** The model: entries by id, which key each live or acked entry holds, when each id was acked. */
class Model {
  readonly live = new Map<string, { key: string | undefined; dead: boolean }>()
  readonly owner = new Map<string, string>()
  readonly ackedAt = new Map<string, number>()
  readonly ackedKey = new Map<string, string>()

  /** The id a repeated `key` returns at `now`, if any. */
  holder(key: string, now: number): string | undefined {
    const id = this.owner.get(key)
    if (id === undefined) return undefined
    if (this.live.has(id)) return id
    const at = this.ackedAt.get(id)
    return at !== undefined && now - at < WINDOW ? id : undefined
  }
}

/**
 * What the log in `dir` remembers at `now`: per acked id whether `ack` succeeds, per key the id a
 * repeated `append` returns (which writes when the key was forgotten: ask the last question of a
 * directory in it, the others on a copy). The questions are independent (distinct ids, distinct keys),
 * so they go to the log at once.
 */
const remembered = async (dir: string, now: number, hooks: CompactionHooks, model: Model) => {
  const { core, notes } = open(dir, now, hooks)
  try {
    const acks = await Promise.all([...model.ackedAt.keys()].map((id) =>
      call<void>((d) => core.ack(id, now, d)).then(
        () => [id, true] as const,
        (e: DeliveryLogError) => {
          assert.strictEqual(e.reason, "unknown-id")
          return [id, false] as const
        }
      )
    ))
    const appended = await Promise.all(
      [...model.owner.keys()].map((key) =>
        call<DeliveryEntry>((d) => core.append(message(0, key), now, d, undefined)).then((e) => {
          const fresh = !model.live.has(e.id) && !model.ackedAt.has(e.id)
          return [key, fresh ? null : e.id] as const
        })
      )
    )
    const ids: Record<string, boolean> = Object.fromEntries(acks)
    const keys: Record<string, string | null> = Object.fromEntries(appended)
    return { ids, keys, fromCheckpoint: notes.fromCheckpoint === true }
  } finally {
    await core.close()
  }
}

const expected = (model: Model, now: number) => ({
  ids: Object.fromEntries([...model.ackedAt].map(([id, at]) => [id, now - at < WINDOW])),
  keys: Object.fromEntries([...model.owner.keys()].map((k) => [k, model.holder(k, now) ?? null]))
})

type Op =
  | { readonly op: "append"; readonly key: number | undefined }
  | { readonly op: "ack" | "attempt" | "mark" | "dead" | "requeue"; readonly pick: number }
  | { readonly op: "tick"; readonly ms: number }
  | { readonly op: "compact" | "reopen" | "crash" }

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({ op: fc.constant("append" as const), key: fc.option(fc.nat(12), { nil: undefined }) })
  },
  { weight: 7, arbitrary: fc.record({ op: fc.constant("ack" as const), pick: fc.nat() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constantFrom("attempt" as const, "mark" as const, "dead" as const, "requeue" as const),
      pick: fc.nat()
    })
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant("tick" as const), ms: fc.integer({ min: 0, max: 700 }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constantFrom("compact" as const, "reopen" as const, "crash" as const) }) }
)

/** What the runs of a property went through, summed (each property checks it reached all of it). */
interface Reached {
  runs: number
  /** Compactions that installed a snapshot (the `compact` ops; LogCore alone starts none by itself). */
  compactions: number
  /** Clean re-opens that read a CHECKPOINT, and ones that replayed the segments. */
  fromCheckpoint: number
  replayed: number
  crashes: number
  /** Acked ids past the window at the end (forgotten: `unknown-id`), and ones still in it. */
  forgottenIds: number
  rememberedIds: number
}

const reachedNone = (): Reached => ({
  runs: 0,
  compactions: 0,
  fromCheckpoint: 0,
  replayed: 0,
  crashes: 0,
  forgottenIds: 0,
  rememberedIds: 0
})

/** Keyed appends in the prelude go to the log this many at a time, then their acks. */
const BULK_CHUNK = 16

/**
 * `bulk` keyed appends acked soon after (segments rolled, records of acked entries to compact away), then `ops`.
 * Stops at its next step once `signal` is aborted; closes its log and removes its files either way.
 */
const runModel = async (
  bulk: number,
  ops: ReadonlyArray<Op>,
  digest: KeyDigest | undefined,
  signal: AbortSignal,
  reached: Reached
): Promise<void> => {
  const tmp = tempRoot("log-acked")
  const copyDir = (from: string): string => copyLogDir(from, tmp.next())
  const hooks: CompactionHooks = {
    ...(digest === undefined ? {} : { digest }),
    step: (step) => {
      if (step === "renamed") reached.compactions++
    }
  }
  let dir = tmp.next()
  let now = 1_000_000
  let core = open(dir, now, hooks).core
  try {
    const model = new Model()
    let n = 0
    for (let from = 0; from < bulk; from += BULK_CHUNK) {
      signal.throwIfAborted()
      const keys = Array.from(
        { length: Math.min(BULK_CHUNK, bulk - from) },
        (_, i) => `reply:session-${100 + from + i}:turn-${(100 + from + i) * 7}`
      )
      const entries = await Promise.all(
        keys.map((key) => call<DeliveryEntry>((d) => core.append(message(++n, key), now, d, undefined)))
      )
      await Promise.all(entries.map((e) => call<void>((d) => core.ack(e.id, now, d))))
      entries.forEach((e, i) => {
        model.owner.set(keys[i]!, e.id)
        model.ackedAt.set(e.id, now)
      })
    }
    for (const o of ops) {
      signal.throwIfAborted()
      const ids = [...model.live.keys()]
      const id = "pick" in o && ids.length > 0 ? ids[o.pick % ids.length]! : undefined
      const live = id === undefined ? undefined : model.live.get(id)!
      switch (o.op) {
        case "append": {
          const key = o.key === undefined ? undefined : `reply:session-${o.key}:turn-${o.key * 7}`
          const known = key === undefined ? undefined : model.holder(key, now)
          const e = await call<DeliveryEntry>((d) => core.append(message(++n, key), now, d, undefined))
          if (known !== undefined) assert.strictEqual(e.id, known, `key ${key} returns its entry`)
          else {
            if (key !== undefined) assert.notInclude([...model.live.keys(), ...model.ackedAt.keys()], e.id)
            model.live.set(e.id, { key, dead: false })
            if (key !== undefined) model.owner.set(key, e.id)
          }
          break
        }
        case "ack":
          if (id !== undefined && !live!.dead) {
            await call<void>((d) => core.ack(id, now, d))
            model.live.delete(id)
            model.ackedAt.set(id, now)
          }
          break
        case "attempt":
          if (id !== undefined && !live!.dead) {
            await call((d) => core.attempt(id, { error: "down", nextAttemptAt: now }, d))
          }
          break
        case "mark":
          if (id !== undefined && !live!.dead) await call<void>((d) => core.markStarted(id, d))
          break
        case "dead":
          if (id !== undefined) {
            await call<void>((d) => core.deadLetter(id, "gone", d))
            live!.dead = true
          }
          break
        case "requeue":
          if (id !== undefined) {
            await call<void>((d) => core.requeue(id, d))
            live!.dead = false
          }
          break
        case "tick":
          now += o.ms
          break
        case "compact":
          await core.compact()
          break
        case "reopen": {
          await core.close()
          const opened = open(dir, now, hooks)
          // A clean close leaves a checkpoint when it pays (more acked ids than live entries); open uses every one.
          assert.strictEqual(opened.notes.fromCheckpoint === true, fs.existsSync(join(dir, "CHECKPOINT")))
          if (opened.notes.fromCheckpoint === true) reached.fromCheckpoint++
          else reached.replayed++
          core = opened.core
          break
        }
        case "crash": {
          // What a kill -9 leaves: the files as they are (and the checkpoint of the last clean close).
          await call<void>((d) => core.flush(d))
          const image = copyDir(dir)
          await core.close()
          dir = image
          core = open(dir, now, hooks).core
          reached.crashes++
          break
        }
      }
    }
    await call<void>((d) => core.flush(d))
    const want = expected(model, now)
    const crashImage = copyDir(dir)
    await core.close()
    signal.throwIfAborted()
    const crashed = await remembered(crashImage, now, hooks, model)
    assert.deepStrictEqual({ ids: crashed.ids, keys: crashed.keys }, want, "re-opened from a crash image")
    signal.throwIfAborted()
    const withoutCheckpoint = copyDir(dir)
    fs.rmSync(join(withoutCheckpoint, "CHECKPOINT"), { force: true })
    const replayed = await remembered(withoutCheckpoint, now, hooks, model)
    assert.isFalse(replayed.fromCheckpoint)
    assert.deepStrictEqual({ ids: replayed.ids, keys: replayed.keys }, want, "re-opened by replay")
    signal.throwIfAborted()
    const checkpointed = fs.existsSync(join(dir, "CHECKPOINT"))
    const clean = await remembered(dir, now, hooks, model)
    assert.strictEqual(clean.fromCheckpoint, checkpointed)
    assert.deepStrictEqual({ ids: clean.ids, keys: clean.keys }, want, "re-opened from the checkpoint")
    reached.runs++
    for (const remembers of Object.values(want.ids)) {
      if (remembers) reached.rememberedIds++
      else reached.forgottenIds++
    }
  } finally {
    await core.close()
    tmp.rm()
  }
}

/** Every key has one digest: each repeated key is found only by reading its record back. */
const collide: KeyDigest = (_key, out) => {
  out[0] = 42
  out[1] = 42
}

/** Ops after the prelude: long enough for the window to pass a few times (ticks of up to 700 ms, 1 s window). */
const opsArb = fc.array(opArb, { minLength: 20, maxLength: 150 })

describe("DeliveryLog: acked ids and keys", () => {
  it(
    "remember exactly the model's ids and keys through compactions, re-opens, crashes and the window",
    async ({ signal }) => {
      const reached = reachedNone()
      await checkBounded(
        fc.tuple(fc.nat(120), opsArb),
        ([bulk, ops], stop) => runModel(bulk, ops, undefined, stop, reached),
        { numRuns: 25, minRuns: 8, budgetMs: 60_000, signal }
      )
      // What the runs went through: every path the property is about was taken.
      assert.isAtLeast(reached.runs, 8)
      for (const k of ["compactions", "fromCheckpoint", "crashes", "forgottenIds", "rememberedIds"] as const) {
        assert.isAbove(reached[k], 0, `${k} in ${JSON.stringify(reached)}`)
      }
    },
    120_000
  )

  it(
    "with every key's digest the same, a distinct key always gets its own entry and a repeated one its own",
    async ({ signal }) => {
      const reached = reachedNone()
      await checkBounded(
        fc.tuple(fc.nat(40), opsArb),
        ([bulk, ops], stop) => runModel(bulk, ops, collide, stop, reached),
        { numRuns: 15, minRuns: 5, budgetMs: 60_000, signal }
      )
      assert.isAtLeast(reached.runs, 5)
      assert.isAbove(reached.forgottenIds + reached.rememberedIds, 0)
    },
    120_000
  )
})
