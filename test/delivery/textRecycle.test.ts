/**
 * The texts' arena recycles the buffer of a chunk that nothing reads any more (src/delivery/textArena.ts):
 * a new chunk's buffer is otherwise fresh memory, faulted in page by page as the encoder writes it. A
 * chunk is recycled only with nothing live in it, no object entry ever holding a text there, and no
 * frozen capture out (a compaction reading it); a read through a recycled chunk fails loudly. And through
 * the log: a compaction whose captured chunks are emptied and reused before it writes its snapshot still
 * writes every text exactly; appends kept open reuse chunks; a running checkpoint's entries go into the
 * buffer the log keeps for them, framed in place, the same bytes as in a fresh one.
 */
import { assert, describe, it } from "@effect/vitest"
import { randomUUID } from "node:crypto"
import * as fs from "node:fs"
import { join } from "node:path"
import { afterAll } from "vitest"
import { AckedWindow } from "../../src/delivery/ackedWindow.js"
import { captureCheckpoint, dropCheckpoint, frameCheckpoint } from "../../src/delivery/checkpoint.js"
import type { CompactionHooks } from "../../src/delivery/compaction.js"
import { EntryData } from "../../src/delivery/entryData.js"
import { type Done, LogCore } from "../../src/delivery/logCore.js"
import { CHUNK_BYTES, KEEP_FREE_CHUNKS, TextArena } from "../../src/delivery/textArena.js"
import type { DeliveryEntry, OutboundMessage } from "../../src/delivery/types.js"
import { type ResolvedOptions, resolveOptions } from "../../src/delivery/validate.js"
import { tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("text-recycle")
afterAll(tmp.rm)

const TEXT = Buffer.from(JSON.stringify({ channel: "c", to: "t", body: "abcdefghi".repeat(300) }))
/** Texts of `TEXT`'s size in one chunk. */
const PER_CHUNK = Math.floor(CHUNK_BYTES / TEXT.length)

/** Place `n` texts by number (as slot-only entries do); their chunk numbers and offsets. */
const placeAll = (arena: TextArena, n: number): Array<readonly [no: number, at: number]> =>
  Array.from({ length: n }, () => {
    const at = arena.place(TEXT, 0, TEXT.length)
    return [arena.currentNo, at] as const
  })

describe("TextArena: recycled chunks", () => {
  it("a chunk let go with nothing live serves a later chunk (its buffer); a read through the old one fails", () => {
    const arena = new TextArena()
    const placed = placeAll(arena, 3 * PER_CHUNK)
    const old = [0, 1, 2].map((no) => arena.chunk(no))
    const oldBuffers = new Set(old.map((c) => c.buf))
    for (const [no] of placed) arena.releasePlaced(no, TEXT.length)
    // The next chunk started finds the three let go: their buffers are reused, none fresh.
    const more = placeAll(arena, 2 * PER_CHUNK)
    assert.strictEqual(arena.recycled, 3)
    for (const k of [0, 1]) {
      assert.isTrue(oldBuffers.has(arena.chunk(more[k * PER_CHUNK]![0]).buf), `new chunk ${k} on an old buffer`)
    }
    for (const [no, at] of more) assert.strictEqual(arena.chunk(no).text(at, TEXT.length, true), TEXT.toString())
    for (const c of old) assert.throws(() => c.text(0, TEXT.length, true), /recycled/)
  })

  it("at most KEEP_FREE_CHUNKS buffers are kept", () => {
    const arena = new TextArena()
    const placed = placeAll(arena, (KEEP_FREE_CHUNKS + 6) * PER_CHUNK)
    for (const [no] of placed) arena.releasePlaced(no, TEXT.length)
    placeAll(arena, PER_CHUNK + 1)
    assert.strictEqual(arena.recycled, KEEP_FREE_CHUNKS)
  })

  it("not recycled: a chunk an object entry held a text in, or any chunk while a capture is pinned", () => {
    const owned = new TextArena()
    const placed = placeAll(owned, PER_CHUNK)
    const e = new EntryData("id-1", 1, 0, undefined, undefined, 0, undefined, undefined, "pending", true, 100)
    owned.own(e, placed[0]![0], placed[0]![1], TEXT.length, true)
    owned.release(e)
    for (const [no] of placed.slice(1)) owned.releasePlaced(no, TEXT.length)
    placeAll(owned, 2 * PER_CHUNK)
    assert.strictEqual(owned.recycled, 0)
    // The released entry still reads its text (nothing overwrote the chunk).
    assert.strictEqual(e.text, TEXT.toString())

    const pinned = new TextArena()
    pinned.pin()
    const first = placeAll(pinned, PER_CHUNK)
    for (const [no] of first) pinned.releasePlaced(no, TEXT.length)
    placeAll(pinned, 2 * PER_CHUNK)
    assert.strictEqual(pinned.recycled, 0)
    pinned.unpin()
    const second = placeAll(pinned, PER_CHUNK)
    for (const [no] of second) pinned.releasePlaced(no, TEXT.length)
    placeAll(pinned, 2 * PER_CHUNK)
    assert.isAbove(pinned.recycled, 0)
  })
})

const options = (dir: string): ResolvedOptions =>
  resolveOptions({ dir, fsync: "never", segmentBytes: 1 << 20 }) as ResolvedOptions

const call = <A>(f: (done: Done<A>) => void): Promise<A> =>
  new Promise((resolve, reject) => f((e, v) => (e ? reject(e) : resolve(v as A))))

const message = (n: number): OutboundMessage => ({
  channel: "c",
  to: `r${n % 5}`,
  body: { n, text: `${n} `.repeat(400) }
})

/** Append `from..to-1` with `now`; their entries once durable. */
const appendAll = (core: LogCore, from: number, to: number): Promise<Array<DeliveryEntry>> =>
  Promise.all(
    Array.from({ length: to - from }, (_, k) =>
      call<DeliveryEntry>((d) => core.append(message(from + k), 1, d, undefined)))
  )

describe("the log's texts recycled", () => {
  it("a compaction whose captured chunks are emptied and reused before its snapshot is written keeps every text", async () => {
    const dir = tmp.next()
    let core: LogCore | undefined
    let later: Array<Promise<DeliveryEntry>> = []
    let pendingIds: Array<string> = []
    const hooks: CompactionHooks = {
      step: (step) => {
        if (step !== "checkpointed") return
        // Right after the capture, before the snapshot is written: every captured entry acked (their
        // chunks emptied) and more appended than those chunks hold (new chunks started).
        for (const id of pendingIds) core!.ack(id, 2, () => {})
        later = Array.from(
          { length: 600 },
          (_, k) => call<DeliveryEntry>((d) => core!.append(message(10_000 + k), 2, d, undefined))
        )
      }
    }
    core = LogCore.open(options(dir), 1, hooks).core
    const first = await appendAll(core, 0, 600)
    pendingIds = first.map((e) => e.id)
    await core.compact()
    const kept = await Promise.all(later)
    await core.close()
    const reopened = LogCore.open(options(dir), 3, {}).core
    const pending = reopened.list("pending")
    assert.deepStrictEqual(pending.map((e) => [e.id, e.message]), kept.map((e) => [e.id, e.message]))
    await reopened.close()
  })

  it("appends acked and appended again reuse the chunks' buffers", async () => {
    const dir = tmp.next()
    const core = LogCore.open(options(dir), 1, {}).core
    for (let round = 0; round < 4; round++) {
      const entries = await appendAll(core, round * 1000, round * 1000 + 1000)
      for (const e of entries) assert.deepStrictEqual(core.get(e.id)?.message, e.message)
      await Promise.all(entries.map((e) => call<void>((d) => core.ack(e.id, 1, d))))
    }
    assert.isAbove(core.state.texts.recycled, 0)
    await core.close()
  })
})

describe("a running checkpoint's room", () => {
  it("entries serialised into the room given and framed after them in place: the same bytes as in a fresh buffer", () => {
    const dir = tmp.next()
    fs.mkdirSync(dir, { recursive: true })
    const live = Array.from(
      { length: 40 },
      (_, i) =>
        new EntryData(
          randomUUID(),
          i,
          1000 + i,
          undefined,
          JSON.stringify({ channel: "c", to: "t", body: i }),
          0,
          undefined,
          undefined,
          "pending",
          true,
          200
        )
    )
    const w = new AckedWindow()
    const locate = (address: number, out: Uint32Array): boolean => {
      out[0] = 1
      out[1] = address
      return true
    }
    const files = [{ number: 1, kind: "log" as const, size: 10, crc: 5 }]
    const fresh = captureCheckpoint(dir, { nextLsn: 7, nextSeq: 9, liveBytes: 123 }, live, w.view())
    const freshRest = Buffer.from(frameCheckpoint(fresh, files, locate))
    dropCheckpoint(dir, fresh.fd)
    const room = Buffer.alloc(64 * 1024, 0xee)
    const inRoom = captureCheckpoint(dir, { nextLsn: 7, nextSeq: 9, liveBytes: 123 }, live, w.view(), room)
    assert.strictEqual(inRoom.entries.buffer, room.buffer, "the entries are in the room")
    const rest = frameCheckpoint(inRoom, files, locate)
    assert.strictEqual(rest.buffer, room.buffer, "framed in place")
    assert.isTrue(rest.equals(freshRest))
    dropCheckpoint(dir, inRoom.fd)
    // Too small a room: a fresh buffer, the same bytes.
    const small = captureCheckpoint(dir, { nextLsn: 7, nextSeq: 9, liveBytes: 123 }, live, w.view(), Buffer.alloc(16))
    assert.isTrue(frameCheckpoint(small, files, locate).equals(freshRest))
    dropCheckpoint(dir, small.fd)
    assert.isFalse(fs.existsSync(join(dir, "CHECKPOINT")))
  })
})
