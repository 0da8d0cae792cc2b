/**
 * LiveEntries (the log's live entries by id, in insertion order) against a plain Map model: random
 * adds, deletes of present and unknown ids and lookups, over enough entries to grow the table and to
 * pack the holes several times; ids of other shapes than a UUID, and ids that all start probing at one
 * slot (long probe runs, every delete shifting entries back), must work the same.
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { randomUUID } from "node:crypto"
import { EntryData } from "../../src/delivery/entryData.js"
import { hashId, LiveEntries } from "../../src/delivery/liveEntries.js"

const entry = (id: string, seq: number) =>
  new EntryData(
    id,
    seq,
    0,
    undefined,
    "{\"channel\":\"c\",\"to\":\"t\",\"body\":1}",
    0,
    undefined,
    undefined,
    "pending",
    true,
    90
  )

const check = (live: LiveEntries, model: Map<string, EntryData>, probes: ReadonlyArray<string>) => {
  assert.strictEqual(live.size, model.size)
  assert.deepStrictEqual(
    Array.from(live.values(), (e) => e.id),
    Array.from(model.keys()),
    "same entries, in insertion order"
  )
  for (const id of probes) {
    assert.strictEqual(live.get(id), model.get(id), id)
    assert.strictEqual(live.has(id), model.has(id), id)
  }
}

describe("LiveEntries", () => {
  it("matches a Map model through adds, deletes and lookups", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.record({ op: fc.constant("add" as const), kind: fc.constantFrom("uuid", "uuid", "other") }),
            fc.record({ op: fc.constant("delete" as const), pick: fc.nat(), run: fc.integer({ min: 1, max: 600 }) }),
            fc.record({ op: fc.constant("deleteUnknown" as const) })
          ),
          { maxLength: 300 }
        ),
        fc.integer({ min: 0, max: 4000 }),
        (ops, bulk) => {
          const live = new LiveEntries()
          const model = new Map<string, EntryData>()
          const seen: Array<string> = []
          const add = (kind: string) => {
            const id = kind === "other" ? `other-${seen.length}` : randomUUID()
            const e = entry(id, seen.length + 1)
            live.add(e)
            model.set(id, e)
            seen.push(id)
          }
          // Enough entries first to grow the table past its first capacity.
          for (let i = 0; i < bulk; i++) add("uuid")
          for (const o of ops) {
            if (o.op === "add") add(o.kind)
            else if (o.op === "deleteUnknown") assert.isFalse(live.delete(`unknown-${seen.length}`))
            else if (seen.length > 0) {
              // A run of deletes from a random point, mostly in order (as acks come), so holes pile up and get packed.
              for (let k = 0; k < o.run; k++) {
                const id = seen[(o.pick + k) % seen.length]!
                assert.strictEqual(live.delete(id), model.delete(id), id)
              }
            }
          }
          check(live, model, [...seen.slice(-200), ...seen.slice(0, 200), "nope", ""])
        }
      ),
      { numRuns: 60 }
    )
  })

  it("finds every id when many share one home slot or one hash, deleted in random order (long probe runs, backward shifts)", () => {
    // 300 ids whose hash has the same low 10 bits: in the first table (1,024 slots) they all start probing at
    // slot 1,000, and the run wraps past the end of the table.
    const ids: Array<string> = []
    for (let i = 0; ids.length < 300; i++) if ((hashId(`id-${i}`) & 1023) === 1000) ids.push(`id-${i}`)
    const live = new LiveEntries()
    const model = new Map<string, EntryData>()
    // UUIDs sharing their first eight hex digits (the hash of a UUID) differ only past them.
    const sharing = Array.from({ length: 200 }, () => `0badc0de${randomUUID().slice(8)}`)
    ids.push(...sharing)
    // A few ids elsewhere too, whose own slots the run passes over.
    for (const id of [...ids, "a", "b", "c", randomUUID()]) {
      const e = entry(id, model.size + 1)
      live.add(e)
      model.set(id, e)
    }
    const order = fc.sample(fc.shuffledSubarray(ids, { minLength: ids.length, maxLength: ids.length }), {
      numRuns: 1,
      seed: 7
    })[0]!
    order.forEach((id, k) => {
      assert.isTrue(live.delete(id))
      model.delete(id)
      if (k % 17 === 0) check(live, model, [...ids, "a", "b", "c"])
    })
    check(live, model, [...ids, "a", "b", "c"])
    assert.strictEqual(live.size, 4)
    assert.strictEqual(hashId(sharing[0]!), hashId(sharing[1]!), "UUIDs with the same first 32 bits share a hash")
  })

  it("packs its holes and still finds every entry, in order", () => {
    const live = new LiveEntries()
    const model = new Map<string, EntryData>()
    const ids = Array.from({ length: 6000 }, () => randomUUID())
    ids.forEach((id, i) => {
      const e = entry(id, i + 1)
      live.add(e)
      model.set(id, e)
    })
    // Acks come mostly oldest first: several packs happen on the way down to 500 entries.
    for (let k = 0; k < 5500; k++) {
      const id = ids[k % 7 === 3 ? 5999 - k : k]!
      assert.strictEqual(live.delete(id), model.delete(id))
      if (k % 1000 === 0) check(live, model, ids)
    }
    check(live, model, ids)
  })
})
