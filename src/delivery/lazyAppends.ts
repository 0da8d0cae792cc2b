/**
 * Replay's appends that are not entries yet. Most appends a log holds are acked a few records later;
 * made into an `EntryData` (three strings) only for their ack to drop it, they cost replay its
 * allocations and GC. An append of a canonical id is kept here instead, as its id's 128 bits and
 * where its payload is in the reader's window, until one of these:
 * - its ack: the id goes to the dedupe window straight from the bytes (a keyed one with its key's
 *   digest, taken from the bytes too, and its record's place), no entry made;
 * - a "started" record: a flag;
 * - any other record about it (attempt, dead, requeue), an append that is not kept here (another id
 *   shape), the end of the file, or more than `ARENA_BYTES` of kept payloads: every kept append still
 *   here is made into its entry then, oldest first, so entries reach the state in append (= seq) order.
 * When the reader is about to reuse its window, the payloads of the appends still kept are copied
 * aside into an arena (an append batch straddling two windows stays kept instead of becoming entries).
 * Each append is checked as strictly as before (`checkAppend`), where it is read: corruption is
 * reported at the same record. The state after replay is the same as if every append had been an
 * entry at once.
 */
import { AckedWindow } from "./ackedWindow.js"
import { digestAsciiKey, digestKey } from "./keyDigest.js"
import { checkAppend, readAppend } from "./payload.js"
import type { LogState } from "./state.js"
import { hashWords, parseUuidBytes } from "./uuidWords.js"

const STARTED = 1
const GONE = 2
/** The payload is in the arena (copied out of a window the reader reused), not in `buf`. */
const ARENA = 4
/** At most this many bytes of kept payloads are copied aside; past that they become entries. */
const ARENA_BYTES = 4 << 20
/** Payload bytes of an ack of a canonical id: idLen, id, at. */
const ACK_BYTES = 1 + 36 + 8
/** Where an append's key starts, after idLen, a 36-byte id, seq, enqueuedAt and keyLen. */
const KEY_AT = 1 + 36 + 20

const words = new Uint32Array(4)
const digest = new Uint32Array(2)
const place = new Uint32Array(2)

export class LazyAppends {
  private n = 0
  private alive = 0
  private cap = 0
  private ids = new Uint32Array(0)
  private starts = new Int32Array(0)
  private ends = new Int32Array(0)
  private keyEnds = new Int32Array(0)
  private sizes = new Int32Array(0)
  private addresses = new Float64Array(0)
  private flags = new Uint8Array(0)
  /** Open addressing by id: slot + 1, 0 empty; never deleted from (a flush empties it). */
  private cells = new Int32Array(0)
  /** The window every kept payload not in the arena is in. */
  private buf: Buffer | undefined
  /** Kept appends (not acked) whose payload is in `buf`. */
  private inWindow = 0
  private arena: Buffer = Buffer.alloc(0)
  private arenaAt = 0

  constructor(private readonly state: LogState) {
    this.grow(4096)
  }

  private grow(cap: number): void {
    const copy = <A extends Int32Array | Uint32Array | Float64Array | Uint8Array>(a: A, stride: number): A => {
      const out = new (a.constructor as new(n: number) => A)(stride * cap)
      out.set(a)
      return out
    }
    this.ids = copy(this.ids, 4)
    this.starts = copy(this.starts, 1)
    this.ends = copy(this.ends, 1)
    this.keyEnds = copy(this.keyEnds, 1)
    this.sizes = copy(this.sizes, 1)
    this.addresses = copy(this.addresses, 1)
    this.flags = copy(this.flags, 1)
    this.cap = cap
    this.cells = new Int32Array(2 * cap)
    for (let s = 0; s < this.n; s++) if ((this.flags[s]! & GONE) === 0) this.insertCell(s)
  }

  private home(s: number): number {
    const w = this.ids
    return hashWords(w[4 * s]!, w[4 * s + 1]!, w[4 * s + 2]!, w[4 * s + 3]!)
  }

  private insertCell(s: number): void {
    const cells = this.cells
    const mask = cells.length - 1
    let i = this.home(s) & mask
    while (cells[i] !== 0) i = (i + 1) & mask
    cells[i] = s + 1
  }

  /** The slot of the kept append with the id in `words`, or -1. */
  private find(): number {
    if (this.alive === 0) return -1
    const cells = this.cells
    const mask = cells.length - 1
    const w = this.ids
    const a = words[0]!
    const b = words[1]!
    const c = words[2]!
    const d = words[3]!
    for (let i = hashWords(a, b, c, d) & mask;; i = (i + 1) & mask) {
      const v = cells[i]!
      if (v === 0) return -1
      const s = v - 1
      if (
        (this.flags[s]! & GONE) === 0 && w[4 * s] === a && w[4 * s + 1] === b && w[4 * s + 2] === c &&
        w[4 * s + 3] === d
      ) {
        return s
      }
    }
  }

  /** Is the id of the id-keyed payload at `start` a kept append (then `flush` before applying its record)? */
  holds(buf: Buffer, start: number, end: number): boolean {
    return this.alive > 0 && end - start > 36 && buf[start] === 36 && parseUuidBytes(buf, start + 1, 36, words) &&
      this.find() >= 0
  }

  /**
   * An append record (payload `[start, end)` of the window `buf`, `bytes` in all, at `address`): kept,
   * or ignored as a second append of an id held (true); false when it must be an entry now (flush,
   * then insert it). Throws `BadPayload` as `readAppend` would.
   */
  append(buf: Buffer, start: number, end: number, bytes: number, address: number): boolean {
    const keyEnd = checkAppend(buf, start, end)
    if (buf[start] !== 36 || !parseUuidBytes(buf, start + 1, 36, words)) return false
    // Every kept append was acked: start over (the table stays as small as a batch of appends).
    if (this.alive === 0 && this.n > 0) this.reset()
    if (this.buf !== buf) {
      if (this.inWindow > 0) return false
      this.buf = buf
    }
    if (this.find() >= 0 || this.state.live.hasUuid(words)) return true
    const seq = buf.readDoubleBE(start + 37)
    if (seq >= this.state.nextSeq) this.state.nextSeq = seq + 1
    if (2 * (this.n + 1) > this.cap) this.grow(2 * this.cap)
    const s = this.n++
    this.ids.set(words, 4 * s)
    this.starts[s] = start
    this.ends[s] = end
    this.keyEnds[s] = keyEnd
    this.sizes[s] = bytes
    this.addresses[s] = address
    this.flags[s] = 0
    this.insertCell(s)
    this.alive++
    this.inWindow++
    return true
  }

  /** An attempt-started record of a kept append: its flag (true); false if it is not one. */
  started(buf: Buffer, start: number, end: number): boolean {
    if (!this.holds(buf, start, end) || end - start !== 37) return false
    this.flags[this.find()]! |= STARTED
    return true
  }

  /** An ack record of a kept append: its id goes to the dedupe window (true); false if it is not one. */
  ack(buf: Buffer, start: number, end: number): boolean {
    if (this.alive === 0 || end - start !== ACK_BYTES || buf[start] !== 36) return false
    if (!parseUuidBytes(buf, start + 1, 36, words)) return false
    const s = this.find()
    if (s < 0) return false
    const at = buf.readDoubleBE(start + 37)
    const data = this.data(s)
    if ((this.flags[s]! & ARENA) === 0) this.inWindow--
    this.flags[s]! |= GONE
    this.alive--
    const state = this.state
    const window = state.acked
    const keyAt = this.starts[s]! + KEY_AT
    const keyEnd = this.keyEnds[s]!
    if (keyEnd === keyAt) {
      window.addPlainWords(words, at)
      state.liveBytes += AckedWindow.ID_BYTES
      return true
    }
    const bytes = this.sizes[s]!
    state.liveBytes += bytes
    if (state.addresses.locate(this.addresses[s]!, place)) {
      if (window.digest !== digestKey || !digestAsciiKey(data, keyAt, keyEnd, digest)) {
        window.digest(data.toString("utf8", keyAt, keyEnd), digest)
      }
      window.addKeyedWords(words, at, digest, place[0]!, place[1]!, bytes, (this.flags[s]! & STARTED) !== 0)
      return true
    }
    // Its record cannot be pointed at: kept whole, as an ack of the entry would.
    const e = this.entry(s)
    window.add(e.id, at, e, bytes)
    state.keys.set(e.key!, e.id)
    return true
  }

  /** The buffer slot `s`'s payload is in. */
  private data(s: number): Buffer {
    return (this.flags[s]! & ARENA) !== 0 ? this.arena : this.buf!
  }

  private entry(s: number) {
    const e = readAppend(this.data(s), this.starts[s]!, this.ends[s]!)
    e.bytes = this.sizes[s]!
    e.pos = this.addresses[s]!
    if ((this.flags[s]! & STARTED) !== 0) e.started = true
    return e
  }

  /**
   * The reader is about to reuse its window: copy the payloads of the kept appends still in it into
   * the arena (or, past `ARENA_BYTES`, make every kept append into its entry).
   */
  beforeFill(): void {
    if (this.alive === 0) {
      if (this.n > 0) this.reset()
      return
    }
    if (this.inWindow === 0) return
    let bytes = 0
    for (let s = 0; s < this.n; s++) {
      if ((this.flags[s]! & (GONE | ARENA)) === 0) bytes += this.ends[s]! - this.starts[s]!
    }
    if (this.arenaAt + bytes > ARENA_BYTES) return this.flush()
    if (this.arena.length < this.arenaAt + bytes) {
      const grown = Buffer.allocUnsafe(
        Math.min(ARENA_BYTES, Math.max(2 * this.arena.length, this.arenaAt + bytes, 1 << 16))
      )
      this.arena.copy(grown, 0, 0, this.arenaAt)
      this.arena = grown
    }
    const buf = this.buf!
    for (let s = 0; s < this.n; s++) {
      if ((this.flags[s]! & (GONE | ARENA)) !== 0) continue
      const shift = this.arenaAt - this.starts[s]!
      this.arenaAt += buf.copy(this.arena, this.arenaAt, this.starts[s]!, this.ends[s]!)
      this.starts[s]! += shift
      this.ends[s]! += shift
      this.keyEnds[s]! += shift
      this.flags[s]! |= ARENA
    }
    this.inWindow = 0
    this.buf = undefined
  }

  /** Hold nothing (every kept append was acked or made into its entry). */
  private reset(): void {
    this.n = 0
    this.alive = 0
    this.inWindow = 0
    this.arenaAt = 0
    this.cells.fill(0)
    this.buf = undefined
  }

  /** Make every kept append still here into its entry, oldest first; then hold nothing. */
  flush(): void {
    if (this.n === 0) return
    for (let s = 0; s < this.n; s++) if ((this.flags[s]! & GONE) === 0) this.state.insert(this.entry(s))
    this.reset()
  }
}
