/**
 * Slot-only live entries (liveEntries.ts `addPlain`: a plain appended entry held in typed arrays, no
 * object) against the same entries held as `EntryData` objects: lookups, flags, reads, copies, the
 * object a call changes (`object`), deletes with their texts released in the arena, insertion order,
 * the arena letting go of sparse chunks (their slot-only texts become strings), and a checkpoint's
 * entries serialised from the table byte for byte as from the list of objects.
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import { afterAll } from "vitest"
import { AckedWindow } from "../../src/delivery/ackedWindow.js"
import { captureCheckpoint, dropCheckpoint } from "../../src/delivery/checkpoint.js"
import { EntryData } from "../../src/delivery/entryData.js"
import { LiveEntries } from "../../src/delivery/liveEntries.js"
import { CHUNK_BYTES, TextArena } from "../../src/delivery/textArena.js"
import { parseUuid } from "../../src/delivery/uuidWords.js"
import { tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("live-slots")
afterAll(tmp.rm)

const textOf = (seq: number): string =>
  JSON.stringify({
    channel: "telegram",
    to: `chat-${seq % 5}`,
    body: { text: `reply ${seq} ${"é".repeat(seq % 3)}`, n: seq }
  })

interface Made {
  readonly id: string
  readonly seq: number
  readonly text: string
  /** The same entry as an object (the model). */
  readonly model: EntryData
  /** The arena chunk its text went to. */
  readonly chunk: number
}

/** Put `text` in `arena` and add it to `live` slot-only; returns the model object of the same entry. */
const addPlain = (live: LiveEntries, arena: TextArena, seq: number, committed = true): Made => {
  const id = randomUUID()
  const text = textOf(seq)
  const bytes = Buffer.from(text, "utf8")
  const at = arena.place(bytes, 0, bytes.length)
  assert.isAtLeast(at, 0)
  const words = new Uint32Array(4)
  assert.isTrue(parseUuid(id, words))
  const ascii = bytes.length === text.length
  live.addPlain(words, seq, 1000 + seq, 4096 * seq, 100 + seq, arena.currentNo, at, bytes.length, ascii, committed)
  const model = new EntryData(
    id,
    seq,
    1000 + seq,
    undefined,
    text,
    0,
    undefined,
    undefined,
    "pending",
    committed,
    100 + seq,
    false,
    4096 * seq
  )
  return { id, seq, text, model, chunk: arena.currentNo }
}

const sameEntry = (live: LiveEntries, made: Made): void => {
  const s = live.slotOf(made.id)
  assert.isAtLeast(s, 0, made.id)
  const m = made.model
  assert.deepStrictEqual(live.toEntry(s), m.toEntry(), made.id)
  const c = live.copy(s)
  assert.strictEqual(c.id, m.id)
  assert.strictEqual(c.text, m.text)
  assert.strictEqual(c.seq, m.seq)
  assert.strictEqual(c.enqueuedAt, m.enqueuedAt)
  assert.strictEqual(c.status, m.status)
  assert.strictEqual(c.started, m.started)
  assert.strictEqual(c.committed, m.committed)
  assert.strictEqual(c.bytes, m.bytes)
  assert.strictEqual(c.pos, m.pos)
  assert.strictEqual(live.isDead(s), m.status === "dead")
  assert.strictEqual(live.isStarted(s), m.started)
  assert.strictEqual(live.isCommitted(s), m.committed)
  assert.strictEqual(live.posOf(s), m.pos)
  assert.strictEqual(live.bytesOf(s), m.bytes)
  assert.strictEqual(live.idOf(s), m.id)
}

describe("LiveEntries: slot-only entries", () => {
  it("read, change and leave as the same entries held as objects do, in insertion order", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.constant({ op: "add" as const }),
            fc.constant({ op: "addObject" as const }),
            fc.record({ op: fc.constant("delete" as const), pick: fc.nat(), run: fc.integer({ min: 1, max: 400 }) }),
            fc.record({ op: fc.constant("start" as const), pick: fc.nat() }),
            fc.record({ op: fc.constant("commit" as const), pick: fc.nat() }),
            fc.record({ op: fc.constant("attempt" as const), pick: fc.nat() }),
            fc.record({ op: fc.constant("pos" as const), pick: fc.nat() })
          ),
          { maxLength: 200 }
        ),
        fc.integer({ min: 0, max: 3000 }),
        (ops, bulk) => {
          const arena = new TextArena()
          const live = new LiveEntries(undefined, arena)
          const model = new Map<string, Made>()
          let seq = 0
          const add = () => {
            const m = addPlain(live, arena, ++seq, seq % 4 !== 0)
            model.set(m.id, m)
          }
          const addObject = () => {
            const id = `other-${++seq}`
            const e = new EntryData(
              id,
              seq,
              1000 + seq,
              undefined,
              textOf(seq),
              0,
              undefined,
              undefined,
              "pending",
              true,
              50,
              false,
              -1
            )
            const copy = e.clone()
            live.add(e)
            model.set(id, { id, seq, text: textOf(seq), model: copy, chunk: -1 })
          }
          const pick = (n: number): Made | undefined => {
            const all = [...model.values()]
            return all.length === 0 ? undefined : all[n % all.length]
          }
          for (let i = 0; i < bulk; i++) add()
          for (const o of ops) {
            if (o.op === "add") add()
            else if (o.op === "addObject") addObject()
            else if (o.op === "delete") {
              const all = [...model.keys()]
              for (let k = 0; k < o.run && all.length > 0; k++) {
                const id = all[(o.pick + k) % all.length]!
                if (!model.has(id)) continue
                const s = live.slotOf(id)
                const object = live.isObject(s)
                if (object) arena.release(live.object(s))
                live.deleteSlot(s)
                model.delete(id)
                assert.isFalse(live.has(id))
              }
            } else {
              const m = pick(o.pick)
              if (m === undefined) continue
              const s = live.slotOf(m.id)
              if (o.op === "start") {
                live.setStarted(s)
                m.model.started = true
              } else if (o.op === "commit") {
                live.setCommitted(s)
                m.model.committed = true
              } else if (o.op === "pos") {
                live.setPos(s, 77 * m.seq)
                m.model.pos = 77 * m.seq
              } else {
                // A change past the flags: the entry becomes an object entry, the same one from then on.
                const e = live.get(m.id)!
                assert.strictEqual(live.get(m.id), e)
                assert.isTrue(live.isObject(s))
                e.attempts = 2
                e.lastError = "boom"
                m.model.attempts = 2
                m.model.lastError = "boom"
              }
            }
          }
          assert.strictEqual(live.size, model.size)
          assert.deepStrictEqual(
            Array.from(live.slots(), (s) => live.idOf(s)),
            [...model.keys()],
            "insertion order"
          )
          assert.deepStrictEqual(live.list().map((e) => e.id), [...model.keys()])
          const words = new Uint32Array(4)
          for (const m of [...model.values()].slice(0, 50)) {
            if (parseUuid(m.id, words)) assert.isTrue(live.hasUuid(words))
          }
          assert.isFalse(live.has(randomUUID()))
          assert.isTrue(parseUuid(randomUUID(), words))
          assert.isFalse(live.hasUuid(words))
          // Frozen: the entries as they are now, unchanged by what happens to the live ones after.
          const frozen = live.freeze()
          const asFrozen = [...model.values()].map((m) => m.model.clone())
          assert.strictEqual(frozen.length, asFrozen.length)
          for (const m of model.values()) sameEntry(live, m)
          for (const m of [...model.values()].slice(0, 100)) {
            const s = live.slotOf(m.id)
            live.setStarted(s)
            if (m.seq % 2 === 0) live.deleteSlot(s)
          }
          for (let i = 0; i < 50; i++) addPlain(live, arena, ++seq)
          asFrozen.forEach((e, k) => {
            const f = frozen.at(k)!
            for (
              const field of [
                "id",
                "seq",
                "enqueuedAt",
                "text",
                "status",
                "started",
                "committed",
                "bytes",
                "pos",
                "attempts",
                "lastError"
              ] as const
            ) {
              assert.strictEqual(f[field], e[field], `${field} of ${e.id}`)
            }
          })
          assert.strictEqual([...frozen].length, asFrozen.length)
          assert.isUndefined(frozen.at(asFrozen.length))
        }
      ),
      { numRuns: 40 }
    )
  })

  it("a sparse chunk's slot-only texts become strings when the arena lets it go; a deleted entry's text is released", () => {
    const arena = new TextArena()
    const live = new LiveEntries(undefined, arena)
    const made: Array<Made> = []
    // Several chunks' worth of texts.
    while (arena.started < 3) made.push(addPlain(live, arena, made.length + 1))
    const first = made.filter((m) => live.copy(live.slotOf(m.id)).text === m.text)
    assert.strictEqual(first.length, made.length)
    // Keep one entry in ten of the first chunk's (its live bytes under a quarter of its used ones), all the others.
    const firstChunk = made.filter((m) => m.chunk === 0)
    assert.isAbove(firstChunk.length, CHUNK_BYTES / 200)
    const kept = new Set(firstChunk.filter((_, i) => i % 10 === 0).map((m) => m.id))
    for (const m of firstChunk) {
      if (!kept.has(m.id)) live.deleteSlot(live.slotOf(m.id))
    }
    const chunksBefore = arena.chunks
    // Fill on until the arena starts a new chunk: the sparse first one is let go.
    const started = arena.started
    while (arena.started === started) made.push(addPlain(live, arena, made.length + 1))
    assert.isBelow(arena.chunks, chunksBefore + 1, "the sparse chunk was let go")
    for (const m of made) {
      if (firstChunk.includes(m) && !kept.has(m.id)) {
        assert.isFalse(live.has(m.id))
        continue
      }
      const s = live.slotOf(m.id)
      assert.strictEqual(live.isObject(s), kept.has(m.id), "only the sparse chunk's entries became objects")
      sameEntry(live, m)
      if (kept.has(m.id)) assert.isFalse(live.object(s).inArena, "its text is a string now")
    }
    // Every entry deleted: every chunk's live bytes are released, so the next new chunk lets all the older ones go
    // (but the one filled since, whose texts are live).
    assert.isAbove(arena.chunks, 2)
    for (const m of made) if (live.has(m.id)) live.deleteSlot(live.slotOf(m.id))
    const again = arena.started
    let seq = made.length
    while (arena.started === again) addPlain(live, arena, ++seq)
    assert.strictEqual(arena.chunks, 2)
  })

  it("a checkpoint serialises the table's entries as it does the list of them as objects, byte for byte", () => {
    const arena = new TextArena()
    const live = new LiveEntries(undefined, arena)
    const made: Array<Made> = []
    for (let i = 1; i <= 300; i++) made.push(addPlain(live, arena, i))
    // Some started, some dead (objects), one whole (no place known).
    for (const m of made.filter((m) => m.seq % 7 === 0)) live.setStarted(live.slotOf(m.id))
    for (const m of made.filter((m) => m.seq % 11 === 0)) {
      const e = live.get(m.id)!
      e.status = "dead"
      e.lastError = "gone"
    }
    live.get(made[5]!.id)!.pos = -1
    const dir = tmp.next()
    fs.mkdirSync(dir, { recursive: true })
    const w = new AckedWindow()
    const fromTable = captureCheckpoint(dir, { nextLsn: 7, nextSeq: 9, liveBytes: 123 }, live, w.view())
    dropCheckpoint(dir, fromTable.fd)
    const fromList = captureCheckpoint(dir, { nextLsn: 7, nextSeq: 9, liveBytes: 123 }, live.list(), w.view())
    dropCheckpoint(dir, fromList.fd)
    assert.strictEqual(fromTable.header.live, 300)
    assert.deepStrictEqual(fromTable.header, fromList.header)
    assert.isTrue(fromTable.entries.equals(fromList.entries), "the same entries' bytes")
    assert.deepStrictEqual(Array.from(fromTable.places), Array.from(fromList.places))
  })
})
