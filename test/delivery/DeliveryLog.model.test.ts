/**
 * Property test: random sequences of append / attempt / ack / deadLetter / requeue / compact / reopen
 * against a simple in-memory model. After every step, pending and dead (ids, order, attempts,
 * status) match the model; small segments make rolls and automatic compactions happen too.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import fc from "fast-check"
import { DeliveryLog } from "../../src/delivery/index.js"
import type { DeliveryEntry } from "../../src/delivery/types.js"
import { tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-model")
afterAll(tmp.rm)

type Op =
  | { readonly op: "append"; readonly key: number | undefined; readonly size: number }
  | { readonly op: "attempt" | "ack" | "dead" | "requeue"; readonly pick: number }
  | { readonly op: "compact" | "reopen" }

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      op: fc.constant("append" as const),
      key: fc.option(fc.integer({ min: 0, max: 5 }), { nil: undefined }),
      size: fc.integer({ min: 0, max: 300 })
    })
  },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constantFrom("attempt" as const, "ack" as const, "dead" as const, "requeue" as const),
      pick: fc.nat()
    })
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constantFrom("compact" as const, "reopen" as const) }) }
)

interface ModelEntry {
  id: string
  seq: number
  attempts: number
  status: "pending" | "dead"
  key: number | undefined
}

const view = (es: ReadonlyArray<DeliveryEntry>) => es.map((e) => `${e.id}/${e.attempts}/${e.status}`)

describe("DeliveryLog against a model", () => {
  it.effect(
    "random operations with compactions and re-opens keep pending and dead equal to the model",
    () =>
      Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(fc.array(opArb, { minLength: 5, maxLength: 40 }), async (ops) => {
            const dir = tmp.next()
            const open = DeliveryLog.open({ dir, fsync: "never", segmentBytes: 512 })
            let scope = await Effect.runPromise(Scope.make())
            let log = await Effect.runPromise(Scope.provide(scope)(open))
            const live = new Map<string, ModelEntry>() // insertion order = seq order
            const keys = new Map<number, string>()
            const run = <A, E>(e: Effect.Effect<A, E>) => Effect.runPromise(e)
            for (const o of ops) {
              const ids = [...live.keys()]
              const id = "pick" in o ? ids[o.pick % Math.max(1, ids.length)] : undefined
              switch (o.op) {
                case "append": {
                  const e = await run(
                    log.append({
                      channel: "c",
                      to: "r",
                      body: "x".repeat(o.size),
                      ...(o.key !== undefined ? { idempotencyKey: `k${o.key}` } : {})
                    })
                  )
                  const known = o.key !== undefined ? keys.get(o.key) : undefined
                  if (known !== undefined) assert.strictEqual(e.id, known, "a known key returns its entry")
                  else {
                    live.set(e.id, { id: e.id, seq: e.seq, attempts: 0, status: "pending", key: o.key })
                    if (o.key !== undefined) keys.set(o.key, e.id)
                  }
                  break
                }
                case "attempt":
                  if (id !== undefined && live.get(id)!.status === "pending") {
                    // Every third pick is a final attempt: one record counts it and moves the entry to dead.
                    const dead = o.pick % 3 === 0
                    const e = await run(log.attempt(id, { error: "e", nextAttemptAt: 1, dead }))
                    live.get(id)!.attempts++
                    if (dead) live.get(id)!.status = "dead"
                    assert.strictEqual(e.attempts, live.get(id)!.attempts)
                    assert.strictEqual(e.status, live.get(id)!.status)
                  }
                  break
                case "ack":
                  if (id !== undefined && live.get(id)!.status === "dead") {
                    const r = await run(Effect.flip(log.ack(id)))
                    assert.strictEqual(r.reason, "not-pending", "ack of a dead entry fails and leaves it")
                  } else if (id !== undefined) {
                    await run(log.ack(id))
                    live.delete(id)
                    await run(log.ack(id)) // idempotent
                  }
                  break
                case "dead":
                  if (id !== undefined) {
                    await run(log.deadLetter(id, "r"))
                    const m = live.get(id)!
                    if (m.status === "pending") m.status = "dead"
                  }
                  break
                case "requeue":
                  if (id !== undefined) {
                    await run(log.requeue(id))
                    const m = live.get(id)!
                    if (m.status === "dead") {
                      m.status = "pending"
                      m.attempts = 0
                    }
                  }
                  break
                case "compact":
                  await run(log.compact)
                  break
                case "reopen":
                  await run(Scope.close(scope, Exit.void))
                  scope = await run(Scope.make())
                  log = await run(Scope.provide(scope)(open))
                  break
              }
              const want = (s: "pending" | "dead") =>
                [...live.values()].filter((m) => m.status === s).map((m) => `${m.id}/${m.attempts}/${s}`)
              assert.deepStrictEqual(view(await run(log.pending)), want("pending"), `after ${o.op}`)
              assert.deepStrictEqual(view(await run(log.dead)), want("dead"), `after ${o.op}`)
            }
            await run(Scope.close(scope, Exit.void))
            // A last re-open sees the same.
            const again = await Effect.runPromise(
              Effect.scoped(Effect.flatMap(open, (l) => Effect.all([l.pending, l.dead])))
            )
            assert.deepStrictEqual(
              [...view(again[0]), ...view(again[1])].sort(),
              [...live.values()].map((m) => `${m.id}/${m.attempts}/${m.status}`).sort()
            )
          }),
          { numRuns: 60 }
        )
      ),
    120_000
  )
})
