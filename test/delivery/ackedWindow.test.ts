/**
 * AckedWindow (the ids acked within the dedupe window) against a plain Map model: random adds
 * (canonical UUIDs, ids of other shapes, keyed entries), lookups of present, evicted and unknown
 * ids, and evictions, over enough ids to grow the ring and wrap it; the snapshot copy lists every
 * id once, each list in ack order, with its time.
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { randomUUID } from "node:crypto"
import { AckedWindow } from "../../src/delivery/ackedWindow.js"
import { EntryData } from "../../src/delivery/entryData.js"
import { ackedItems } from "./fixtures/ackedItems.js"

const entry = (id: string, key: string) =>
  new EntryData(
    id,
    1,
    0,
    key,
    "{\"channel\":\"c\",\"to\":\"t\",\"body\":1}",
    0,
    undefined,
    undefined,
    "pending",
    true,
    90
  )

describe("AckedWindow", () => {
  it("matches a Map model through adds, lookups and evictions", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.record({
              op: fc.constant("add" as const),
              kind: fc.constantFrom("uuid", "uuid", "uuid", "other", "keyed"),
              dt: fc.nat(3)
            }),
            fc.record({ op: fc.constant("evict" as const), window: fc.integer({ min: 1, max: 40 }) }),
            fc.record({ op: fc.constant("look" as const), pick: fc.nat() })
          ),
          { maxLength: 400 }
        ),
        fc.integer({ min: 0, max: 3000 }),
        (ops, bulk) => {
          const w = new AckedWindow()
          const model = new Map<string, { at: number; entry: EntryData | undefined }>()
          const seen: Array<string> = []
          let now = 0
          const add = (kind: string) => {
            const id = kind === "other" ? `other-${seen.length}` : randomUUID()
            const e = kind === "keyed" ? entry(id, `k${seen.length}`) : undefined
            w.add(id, now, e, 80)
            model.set(id, { at: now, entry: e })
            seen.push(id)
          }
          // Enough plain ids first to grow the ring past its first capacity.
          for (let i = 0; i < bulk; i++) {
            if (i % 97 === 0) now++
            add("uuid")
          }
          for (const o of ops) {
            if (o.op === "add") {
              now += o.dt
              add(o.kind)
            } else if (o.op === "evict") {
              const gone: Array<string> = []
              w.evict(now, o.window, (id) => gone.push(id))
              for (const [id, m] of model) if (now - m.at >= o.window) model.delete(id)
              for (const id of gone) assert.isFalse(model.has(id))
            } else if (seen.length > 0) {
              const id = seen[o.pick % seen.length]!
              assert.strictEqual(w.has(id), model.has(id), id)
              assert.strictEqual(w.entry(id), model.get(id)?.entry)
            }
            assert.strictEqual(w.size, model.size)
          }
          for (const id of seen) assert.strictEqual(w.has(id), model.has(id), id)
          assert.isFalse(w.has(randomUUID()))
          assert.isFalse(w.has("not-an-id"))
          assert.isFalse(w.has(randomUUID().toUpperCase()))
          const copy = ackedItems(w.copy())
          assert.strictEqual(copy.length, model.size)
          assert.deepStrictEqual(
            new Map(copy.map(([id, at, e]) => [id, { at, entry: e }])),
            model
          )
        }
      ),
      { numRuns: 60 }
    )
  })

  it("forgets an id exactly when the window has passed since its ack, keyed ones too", () => {
    const w = new AckedWindow()
    const plain = [randomUUID(), randomUUID(), randomUUID()]
    const keyed = randomUUID()
    w.add(plain[0]!, 100, undefined, 80)
    w.add(plain[1]!, 100, undefined, 80)
    w.add(keyed, 100, entry(keyed, "reply:s:1"), 300)
    w.add(plain[2]!, 101, undefined, 80)
    const gone: Array<string> = []
    assert.strictEqual(w.evict(109, 10, (id) => gone.push(id)), 0)
    assert.isTrue(w.has(plain[0]!) && w.has(keyed))
    assert.strictEqual(w.evict(110, 10, (id) => gone.push(id)), 80 + 80 + 300)
    assert.deepStrictEqual(gone, [keyed])
    assert.deepStrictEqual([w.has(plain[0]!), w.has(plain[1]!), w.has(keyed), w.has(plain[2]!)], [
      false,
      false,
      false,
      true
    ])
    assert.deepStrictEqual(ackedItems(w.copy()), [[plain[2]!, 101, undefined]])
  })
})
