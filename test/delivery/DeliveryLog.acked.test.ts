/**
 * What the file log remembers of acked entries (ids for a repeated `ack`, idempotency keys for a
 * repeated `append`), on real files, against a model: random appends (keyed from a small pool, and
 * plain), acks, failed attempts, attempt marks, dead letters and requeues, compactions, time passing
 * a short dedupe window, clean re-opens (from the CHECKPOINT) and crashes (the files copied while the
 * log is open). At the end, and in every copy, the remembered ids and keys are exactly the model's:
 * re-opened from the checkpoint, without it, and from a crash image. With a digest that makes every
 * key collide, no distinct message is ever taken for another.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import * as fs from "node:fs"
import { join } from "node:path"
import type { CompactionHooks } from "../../src/delivery/compaction.js"
import type { DeliveryLogError } from "../../src/delivery/errors.js"
import type { KeyDigest } from "../../src/delivery/keyDigest.js"
import { type Done, LogCore } from "../../src/delivery/logCore.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"
import { type ResolvedOptions, resolveOptions } from "../../src/delivery/validate.js"
import { copyLogDir, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-acked")
afterAll(tmp.rm)

const WINDOW = 1_000

const options = (dir: string): ResolvedOptions =>
  resolveOptions({ dir, fsync: "never", segmentBytes: 2048, dedupeWindowMs: WINDOW }) as ResolvedOptions

const call = <A>(f: (done: Done<A>) => void): Promise<A> =>
  new Promise((resolve, reject) => f((e, v) => (e ? reject(e) : resolve(v as A))))

const open = (dir: string, now: number, hooks: CompactionHooks) => LogCore.open(options(dir), now, hooks)

const copyDir = (from: string): string => copyLogDir(from, tmp.next())

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
 * What the log in `dir` remembers at `now`, asked on a copy (a repeated `append` of a forgotten key
 * writes): per acked id whether `ack` succeeds, per key the id a repeated `append` returns.
 */
const remembered = async (dir: string, now: number, hooks: CompactionHooks, model: Model, drop?: string) => {
  const copy = copyDir(dir)
  if (drop !== undefined) fs.rmSync(join(copy, drop), { force: true })
  const { core, notes } = open(copy, now, hooks)
  try {
    const ids: Record<string, boolean> = {}
    for (const id of model.ackedAt.keys()) {
      ids[id] = await call<void>((d) => core.ack(id, now, d)).then(
        () => true,
        (e: DeliveryLogError) => {
          assert.strictEqual(e.reason, "unknown-id")
          return false
        }
      )
    }
    const keys: Record<string, string | null> = {}
    for (const key of model.owner.keys()) {
      const e = await call<DeliveryEntry>((d) => core.append(message(0, key), now, d, undefined))
      const fresh = !model.live.has(e.id) && !model.ackedAt.has(e.id)
      keys[key] = fresh ? null : e.id
    }
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

/** `bulk` keyed appends acked at once (many segments, rolls and ring growth), then `ops`. */
const runModel = async (bulk: number, ops: ReadonlyArray<Op>, digest: KeyDigest | undefined): Promise<void> => {
  const hooks: CompactionHooks = digest === undefined ? {} : { digest }
  let dir = tmp.next()
  let now = 1_000_000
  let core = open(dir, now, hooks).core
  const model = new Model()
  let n = 0
  const prelude: Array<Op> = []
  for (let i = 0; i < bulk; i++) prelude.push({ op: "append", key: 100 + i }, { op: "ack", pick: model.live.size })
  for (const o of [...prelude, ...ops]) {
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
        break
      }
    }
  }
  await call<void>((d) => core.flush(d))
  const want = expected(model, now)
  const crashImage = copyDir(dir)
  await core.close()
  const clean = await remembered(dir, now, hooks, model)
  assert.strictEqual(clean.fromCheckpoint, fs.existsSync(join(dir, "CHECKPOINT")))
  assert.deepStrictEqual({ ids: clean.ids, keys: clean.keys }, want, "re-opened from the checkpoint")
  const replayed = await remembered(dir, now, hooks, model, "CHECKPOINT")
  assert.isFalse(replayed.fromCheckpoint)
  assert.deepStrictEqual({ ids: replayed.ids, keys: replayed.keys }, want, "re-opened by replay")
  const crashed = await remembered(crashImage, now, hooks, model)
  assert.deepStrictEqual({ ids: crashed.ids, keys: crashed.keys }, want, "re-opened from a crash image")
}

/** Every key has one digest: each repeated key is found only by reading its record back. */
const collide: KeyDigest = (_key, out) => {
  out[0] = 42
  out[1] = 42
}

describe("DeliveryLog: acked ids and keys", () => {
  it("remember exactly the model's ids and keys through compactions, re-opens, crashes and the window", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.nat(300),
        fc.array(opArb, { minLength: 20, maxLength: 150 }),
        (bulk, ops) => runModel(bulk, ops, undefined)
      ),
      { numRuns: 25 }
    )
  }, 120_000)

  it(
    "with every key's digest the same, a distinct key always gets its own entry and a repeated one its own",
    async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.nat(40),
          fc.array(opArb, { minLength: 20, maxLength: 150 }),
          (bulk, ops) => runModel(bulk, ops, collide)
        ),
        { numRuns: 15 }
      )
    },
    120_000
  )
})
