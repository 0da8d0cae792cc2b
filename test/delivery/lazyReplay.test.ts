/**
 * Replay keeps an append as its id and place until its ack (lazyAppends.ts): random runs of appends
 * (keyed and plain), attempt-started marks, failed attempts, dead letters, requeues and acks over
 * small segments, then a crash (the directory copied while the log is open, no CHECKPOINT): the log
 * replayed from its files shows exactly what the live log showed — the pending and dead entries in
 * order with their state, every acked id still acked, every key returning its entry with `maybeSent`.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import * as fs from "node:fs"
import { join } from "node:path"
import { type Done, LogCore } from "../../src/delivery/logCore.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"
import { type ResolvedOptions, resolveOptions } from "../../src/delivery/validate.js"
import { copyLogDir, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("lazy-replay")
afterAll(tmp.rm)

const options = (dir: string): ResolvedOptions =>
  resolveOptions({ dir, fsync: "never", segmentBytes: 4096 }) as ResolvedOptions

const call = <A>(f: (done: Done<A>) => void): Promise<A> =>
  new Promise((resolve, reject) => f((e, v) => (e ? reject(e) : resolve(v as A))))

/** A small deterministic PRNG (mulberry32). */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const msg = (n: number, key?: string) => ({
  channel: "c",
  to: `r${n % 3}`,
  body: { n, text: "x".repeat(n % 50) },
  ...(key !== undefined ? { idempotencyKey: key } : {})
})

const show = (e: DeliveryEntry) =>
  `${e.id}/${e.seq}/${e.status}/${e.attempts}/${e.lastError ?? "-"}/${e.nextAttemptAt ?? "-"}/${e.maybeSent === true}`

/** What `core` shows: live entries in order, which acked ids it knows, what each key returns. */
const view = async (core: LogCore, acked: ReadonlyArray<string>, keys: ReadonlyArray<string>) => {
  const live = [...core.list("pending"), ...core.list("dead")].map(show)
  const known: Array<string> = []
  for (const id of acked) {
    if (await call<void>((d) => core.ack(id, 5_000, d)).then(() => true, () => false)) known.push(id)
  }
  const byKey: Array<string> = []
  for (const key of keys) {
    const e = await call<DeliveryEntry>((d) => core.append(msg(0, key), 5_000, d, undefined))
    byKey.push(`${key}=${e.id}/${e.maybeSent === true}`)
  }
  return { live, known, byKey, stats: core.stats().pending }
}

describe("replay with lazy appends", () => {
  for (const seed of [1, 2, 3, 4]) {
    it(`seed ${seed}: the replayed log shows what the live log showed`, async () => {
      const rnd = random(seed)
      const dir = tmp.next()
      const { core } = LogCore.open(options(dir), 1_000, {})
      const pending: Array<string> = []
      const dead: Array<string> = []
      const acked: Array<string> = []
      const keys: Array<string> = []
      for (let i = 0; i < 600; i++) {
        const r = rnd()
        const pick = (a: Array<string>) => a.splice(Math.floor(rnd() * a.length), 1)[0]!
        if (r < 0.4 || pending.length === 0) {
          const key = rnd() < 0.6 ? `reply:s${i % 7}:t${i}` : undefined
          const e = await call<DeliveryEntry>((d) => core.append(msg(i, key), 1_000 + i, d, undefined))
          if (key !== undefined) keys.push(key)
          pending.push(e.id)
        } else if (r < 0.55) {
          const id = pending[Math.floor(rnd() * pending.length)]!
          await call<void>((d) => core.markStarted(id, d))
        } else if (r < 0.62) {
          const id = pending[Math.floor(rnd() * pending.length)]!
          await call<DeliveryEntry>((d) => core.attempt(id, { error: `e${i}`, nextAttemptAt: 9_000 + i }, d))
        } else if (r < 0.66) {
          const id = pick(pending)
          await call<void>((d) => core.deadLetter(id, `gone ${i}`, d))
          dead.push(id)
        } else if (r < 0.69 && dead.length > 0) {
          const id = pick(dead)
          await call<void>((d) => core.requeue(id, d))
          pending.push(id)
        } else {
          const id = pick(pending)
          await call<void>((d) => core.ack(id, 1_000 + i, d))
          acked.push(id)
        }
      }
      await call<void>((d) => core.flush(d))
      const crashed = copyLogDir(dir, tmp.next())
      fs.rmSync(join(crashed, "CHECKPOINT"), { force: true })
      const want = await view(core, acked, keys)
      await core.close()
      const { core: replayed, notes } = LogCore.open(options(crashed), 2_000, {})
      try {
        assert.isFalse(notes.fromCheckpoint === true)
        assert.isAbove(want.known.length, 50)
        assert.isTrue(want.byKey.some((k) => k.endsWith("/true")), "some acked or pending key was started")
        assert.deepStrictEqual(await view(replayed, acked, keys), want)
      } finally {
        await replayed.close()
      }
    })
  }
})
