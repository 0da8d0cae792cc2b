/**
 * The keyed part of the dedupe window (keyedRing.ts through AckedWindow.findKey) against a Map
 * model: keyed entries remembered by a key digest and a record place, read back through a fake
 * store. With a digest that collides on purpose (a key's length), a lookup still returns exactly
 * the entry of that key (never one of another key with the same digest); window expiry, growth past
 * the first capacity and wrap-around, relocation, and a copy restored into a fresh window (what a
 * checkpoint does) keep the same remembered ids and keys.
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { randomUUID } from "node:crypto"
import { AckedWindow, WrongRecord } from "../../src/delivery/ackedWindow.js"
import { EntryData } from "../../src/delivery/entryData.js"
import { digestKey, type KeyDigest } from "../../src/delivery/keyDigest.js"
import { parseUuid, parseUuidBytes } from "../../src/delivery/uuidWords.js"

/** A digest that collides for every two keys of one length. */
const byLength: KeyDigest = (key, out) => {
  out[0] = key.length
  out[1] = 7
}

const entry = (id: string, key: string, seq: number, started = false) =>
  new EntryData(
    id,
    seq,
    1000 + seq,
    key,
    JSON.stringify({ channel: "c", to: "t", body: seq, idempotencyKey: key }),
    0,
    undefined,
    undefined,
    "pending",
    true,
    200 + (seq % 50),
    started
  )

/** A fake log: records by place (file, offset). */
const store = () => {
  const records = new Map<string, EntryData>()
  let next = 0
  return {
    put(e: EntryData): [number, number] {
      const file = 1 + (next >> 10)
      const offset = (next++ & 1023) * 256
      records.set(`${file}:${offset}`, e)
      return [file, offset]
    },
    move(e: EntryData, file: number, offset: number) {
      records.set(`${file}:${offset}`, e)
    },
    read: (file: number, offset: number): EntryData => {
      const e = records.get(`${file}:${offset}`)
      if (e === undefined) throw new Error(`no record at ${file}:${offset}`)
      return e
    }
  }
}

const remembered = (
  w: AckedWindow,
  read: (f: number, o: number) => EntryData,
  ids: Array<string>,
  keys: Array<string>
) => ({
  ids: ids.filter((id) => w.has(id)),
  keys: keys.map((k) => w.findKey(k, read)?.id ?? null)
})

// The property test takes ~9 s alone at load 10: vitest's 30 s default was passed with every worker busy.
describe("AckedWindow keyed ring", { timeout: 120_000 }, () => {
  it("finds exactly the entry of a key among colliding digests, forgets it with the window, survives growth and a restored copy", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.record({ op: fc.constant("add" as const), len: fc.integer({ min: 1, max: 6 }), dt: fc.nat(3) }),
            fc.record({ op: fc.constant("evict" as const), window: fc.integer({ min: 1, max: 60 }) }),
            fc.record({ op: fc.constant("look" as const), pick: fc.nat(), len: fc.integer({ min: 1, max: 6 }) })
          ),
          { maxLength: 300 }
        ),
        fc.integer({ min: 0, max: 2500 }),
        fc.boolean(),
        (ops, bulk, collide) => {
          const digest = collide ? byLength : digestKey
          const w = new AckedWindow(digest)
          const s = store()
          const model = new Map<string, { at: number; e: EntryData }>()
          const keys: Array<string> = []
          const ids: Array<string> = []
          let now = 0
          let seq = 0
          const add = (len: number) => {
            const id = randomUUID()
            // Distinct keys, many of one length (so `byLength` makes them collide).
            const k = `${"k".repeat(len)}#${seq}`
            const e = entry(id, k, ++seq, seq % 3 === 0)
            const [file, offset] = s.put(e)
            assert.isTrue(w.addKeyed(e, now, file, offset))
            model.set(k, { at: now, e })
            keys.push(k)
            ids.push(id)
          }
          for (let i = 0; i < bulk; i++) {
            if (i % 101 === 0) now++
            add(1 + (i % 6))
          }
          for (const o of ops) {
            if (o.op === "add") {
              now += o.dt
              add(o.len)
            } else if (o.op === "evict") {
              w.evict(now, o.window, () => assert.fail("no kept entries here"))
              for (const [k, m] of model) if (now - m.at >= o.window) model.delete(k)
            } else if (keys.length > 0) {
              const k = keys[o.pick % keys.length]!
              const got = w.findKey(k, s.read)
              const want = model.get(k)?.e
              assert.strictEqual(got?.id, want?.id, k)
              if (want !== undefined) {
                assert.strictEqual(got!.key, k)
                assert.strictEqual(got!.text, want.text)
                assert.strictEqual(got!.started, want.started)
                assert.strictEqual(got!.status, "pending")
                assert.strictEqual(got!.attempts, 0)
              }
              // A key never added, with a digest that collides with added ones: nothing.
              assert.isUndefined(w.findKey(`${"z".repeat(o.len)}#${o.pick % (seq + 1)}`, s.read))
            }
            assert.strictEqual(w.size, model.size)
          }
          const before = remembered(w, s.read, ids, keys)
          assert.deepStrictEqual([...before.ids].sort(), [...model.values()].map((m) => m.e.id).sort())
          // What a checkpoint does: a copy of the parts restored into a fresh window.
          const again = new AckedWindow(digest)
          again.restore(w.parts())
          assert.deepStrictEqual(remembered(again, s.read, ids, keys), before)
          assert.strictEqual(again.size, w.size)
          // Both forget the same ids when the window passes.
          w.evict(now + 10, 5, () => {})
          again.evict(now + 10, 5, () => {})
          assert.deepStrictEqual(remembered(again, s.read, ids, keys), remembered(w, s.read, ids, keys))
        }
      ),
      { numRuns: 40 }
    )
  })

  it("an id read from a record's bytes is the same 128 bits as from its text; other shapes are refused", () => {
    const a = new Uint32Array(4)
    const b = new Uint32Array(4)
    for (let i = 0; i < 200; i++) {
      const id = randomUUID()
      const bytes = Buffer.from(`xx${id}yy`, "latin1")
      assert.isTrue(parseUuid(id, a))
      assert.isTrue(parseUuidBytes(bytes, 2, 36, b))
      assert.deepStrictEqual(Array.from(b), Array.from(a))
    }
    const id = randomUUID()
    for (const bad of [id.toUpperCase(), id.replace("-", "_"), `${id.slice(0, 35)}g`, id.slice(1)]) {
      assert.isFalse(parseUuid(bad, a), bad)
      assert.isFalse(parseUuidBytes(Buffer.from(bad, "latin1"), 0, bad.length, b), bad)
    }
  })

  it("a record that holds another id than the window says is refused, not returned", () => {
    const w = new AckedWindow(byLength)
    const a = entry(randomUUID(), "same", 1)
    const b = entry(randomUUID(), "same", 2)
    assert.isTrue(w.addKeyed(a, 0, 3, 0))
    assert.throws(() => w.findKey("same", () => b), WrongRecord)
  })

  it("an entry with a delivery history, or an id of another shape, is not taken by the ring", () => {
    const w = new AckedWindow()
    const tried = entry(randomUUID(), "k1", 1)
    tried.attempts = 1
    tried.lastError = "down"
    assert.isFalse(w.addKeyed(tried, 0, 1, 0))
    const requeued = entry(randomUUID(), "k2", 2)
    requeued.lastError = "was dead"
    assert.isFalse(w.addKeyed(requeued, 0, 1, 0))
    assert.isFalse(w.addKeyed(entry("not-a-uuid", "k3", 3), 0, 1, 0))
    assert.isTrue(w.addKeyed(entry(randomUUID(), "k4", 4), 0, 1, 0))
    assert.strictEqual(w.size, 1)
  })

  it("relocate moves only ids whose record was in a file below the snapshot", () => {
    const w = new AckedWindow()
    const s = store()
    const old = entry(randomUUID(), "old", 1)
    const fresh = entry(randomUUID(), "fresh", 2)
    w.addKeyed(old, 0, 4, 100)
    w.addKeyed(fresh, 0, 9, 200)
    s.move(old, 0x8000_0007, 40)
    s.move(fresh, 9, 200)
    const words = (id: string) => Uint32Array.from(id.replace(/-/g, "").match(/.{8}/g)!.map((h) => parseInt(h, 16)))
    w.relocate(words(old.id), 7, 0x8000_0007, 40)
    w.relocate(words(fresh.id), 7, 0x8000_0007, 80)
    assert.strictEqual(w.findKey("old", s.read)?.id, old.id)
    assert.strictEqual(w.findKey("fresh", s.read)?.id, fresh.id)
    assert.isFalse(w.anyBelow(7))
  })
})
