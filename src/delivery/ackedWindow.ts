/**
 * The ids acked within the dedupe window, in ack order. An id the log made (`randomUUID`: 36
 * lowercase hex digits and dashes) is held as its 128 bits in a typed-array ring, found through an
 * open-addressing table of ring slots, and its ack time as a run (acks of one millisecond share
 * one): ~24 bytes an id instead of a `Map` entry, a 36-character string and an object. The mapping
 * is exact (a canonical UUID and its 128 bits are one-to-one), so a lookup never confuses two ids.
 * Any other id (none is written today), and every id whose entry had an idempotency key (the entry
 * is kept to be returned again), stays in a `Map`.
 */
import type { EntryData } from "./payload.js"

/** An id acked within the window, as a snapshot writes it: its entry (as acked) when it had a key. */
export type AckedItem = readonly [id: string, at: number, entry: EntryData | undefined]

/** A copy of the window for a snapshot (the live one goes on changing while it is written). */
export interface AckedCopy extends Iterable<AckedItem> {
  readonly size: number
}

interface Kept {
  readonly at: number
  readonly entry: EntryData | undefined
  readonly bytes: number
}

const HEX = "0123456789abcdef"

/** The value of a lowercase hex digit's char code, or -1. */
const hexValue = (c: number): number => (c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : -1)

/** Dashes of a canonical UUID: 8-4-4-4-12. */
const isDash = (i: number): boolean => i === 8 || i === 13 || i === 18 || i === 23

/** Parse a canonical lowercase UUID into `out[0..4)`; false (out unchanged in meaning) for anything else. */
const parseUuid = (id: string, out: Uint32Array): boolean => {
  if (id.length !== 36) return false
  let w = 0
  let word = 0
  let digits = 0
  for (let i = 0; i < 36; i++) {
    const c = id.charCodeAt(i)
    if (isDash(i)) {
      if (c !== 45) return false
      continue
    }
    const v = hexValue(c)
    if (v < 0) return false
    word = (word << 4) | v
    if (++digits === 8) {
      out[w++] = word >>> 0
      word = 0
      digits = 0
    }
  }
  return true
}

const formatUuid = (w0: number, w1: number, w2: number, w3: number): string => {
  let s = ""
  for (const w of [w0, w1, w2, w3]) {
    for (let shift = 28; shift >= 0; shift -= 4) {
      if (isDash(s.length)) s += "-"
      s += HEX[(w >>> shift) & 15]!
    }
  }
  return s
}

const hashWords = (a: number, b: number, c: number, d: number): number => {
  let h = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b)
  h = Math.imul(h ^ b ^ (h >>> 15), 0xc2b2ae35)
  h = Math.imul(h ^ c ^ (h >>> 13), 0x85ebca6b)
  h = Math.imul(h ^ d ^ (h >>> 16), 0xc2b2ae35)
  return (h ^ (h >>> 15)) >>> 0
}

const MIN_CAPACITY = 1024

/** Scratch for parsing a looked-up id. */
const scratch = new Uint32Array(4)

export class AckedWindow {
  /** 4 words per slot; slot `(head + i) & (capacity - 1)` is the i-th oldest. */
  private words = new Uint32Array(4 * MIN_CAPACITY)
  private capacity = MIN_CAPACITY
  private head = 0
  private count = 0
  /** Slot + 1 per cell (0: empty), 2 cells per ring slot, linear probing. */
  private table = new Int32Array(2 * MIN_CAPACITY)
  /** Ack times of the ring's ids as runs, oldest first from `runHead`: `runCount[i]` ids acked at `runAt[i]`. */
  private runAt: Array<number> = []
  private runCount: Array<number> = []
  private runHead = 0
  /** Ids kept with their entry (keyed) or not canonical, in ack order. */
  private readonly kept = new Map<string, Kept>()

  /** Bytes each ring id counts for (the compaction heuristic's live weight, as before). */
  static readonly ID_BYTES = 80

  get size(): number {
    return this.count + this.kept.size
  }

  has(id: string): boolean {
    if (this.kept.has(id)) return true
    return parseUuid(id, scratch) && this.find(scratch[0]!, scratch[1]!, scratch[2]!, scratch[3]!) >= 0
  }

  /** The entry kept for an acked keyed id. */
  entry(id: string): EntryData | undefined {
    return this.kept.get(id)?.entry
  }

  /** Remember `id` acked at `at` (with its entry when it had a key); `bytes` for a kept one. */
  add(id: string, at: number, entry: EntryData | undefined, bytes: number): void {
    if (entry === undefined && parseUuid(id, scratch)) {
      const a = scratch[0]!
      const b = scratch[1]!
      const c = scratch[2]!
      const d = scratch[3]!
      if (this.find(a, b, c, d) >= 0) return
      if (this.count === this.capacity) this.grow()
      const slot = (this.head + this.count) & (this.capacity - 1)
      this.words[4 * slot] = a
      this.words[4 * slot + 1] = b
      this.words[4 * slot + 2] = c
      this.words[4 * slot + 3] = d
      this.count++
      this.insertCell(hashWords(a, b, c, d), slot)
      const last = this.runAt.length - 1
      if (last >= this.runHead && this.runAt[last] === at) this.runCount[last]!++
      else {
        this.runAt.push(at)
        this.runCount.push(1)
      }
      return
    }
    this.kept.delete(id)
    this.kept.set(id, { at, entry, bytes })
  }

  /**
   * Forget ids acked `windowMs` or more before `now`, oldest first (each list stops at its first id
   * still inside the window). `gone` sees each kept entry that leaves; returns the bytes freed.
   */
  evict(now: number, windowMs: number, gone: (id: string, entry: EntryData | undefined) => void): number {
    let freed = 0
    while (this.runHead < this.runAt.length && now - this.runAt[this.runHead]! >= windowMs) {
      const n = this.runCount[this.runHead]!
      for (let i = 0; i < n; i++) this.removeOldest()
      freed += n * AckedWindow.ID_BYTES
      this.runHead++
    }
    if (this.runHead > 1024 && this.runHead * 2 > this.runAt.length) {
      this.runAt = this.runAt.slice(this.runHead)
      this.runCount = this.runCount.slice(this.runHead)
      this.runHead = 0
    }
    for (const [id, k] of this.kept) {
      if (now - k.at < windowMs) break
      this.kept.delete(id)
      freed += k.bytes
      gone(id, k.entry)
    }
    return freed
  }

  /** A copy for a snapshot: the kept ids, then the ring's, each in ack order. */
  copy(): AckedCopy {
    const kept = Array.from(this.kept, ([id, k]): AckedItem => [id, k.at, k.entry])
    const words = this.words.slice()
    const mask = this.capacity - 1
    const head = this.head
    const runAt = this.runAt.slice(this.runHead)
    const runCount = this.runCount.slice(this.runHead)
    const size = kept.length + this.count
    return {
      size,
      *[Symbol.iterator]() {
        yield* kept
        let i = 0
        for (let r = 0; r < runAt.length; r++) {
          for (let n = 0; n < runCount[r]!; n++, i++) {
            const s = 4 * ((head + i) & mask)
            yield [formatUuid(words[s]!, words[s + 1]!, words[s + 2]!, words[s + 3]!), runAt[r]!, undefined]
          }
        }
      }
    }
  }

  /** The ring slot holding these words, or -1. */
  private find(a: number, b: number, c: number, d: number): number {
    const cells = this.table
    const mask = cells.length - 1
    const w = this.words
    for (let i = hashWords(a, b, c, d) & mask;; i = (i + 1) & mask) {
      const v = cells[i]!
      if (v === 0) return -1
      const s = 4 * (v - 1)
      if (w[s] === a && w[s + 1] === b && w[s + 2] === c && w[s + 3] === d) return v - 1
    }
  }

  private insertCell(hash: number, slot: number): void {
    const cells = this.table
    const mask = cells.length - 1
    let i = hash & mask
    while (cells[i] !== 0) i = (i + 1) & mask
    cells[i] = slot + 1
  }

  private removeOldest(): void {
    const slot = this.head
    const w = this.words
    const s = 4 * slot
    const cells = this.table
    const mask = cells.length - 1
    let i = hashWords(w[s]!, w[s + 1]!, w[s + 2]!, w[s + 3]!) & mask
    while (cells[i] !== slot + 1) i = (i + 1) & mask
    // Backward-shift deletion: move later cells of the probe run into the hole where they may live.
    let hole = i
    for (let j = (i + 1) & mask; cells[j] !== 0; j = (j + 1) & mask) {
      const t = 4 * (cells[j]! - 1)
      const home = hashWords(w[t]!, w[t + 1]!, w[t + 2]!, w[t + 3]!) & mask
      // The cell at j may move to `hole` if its home is not in (hole, j] (cyclically).
      if (hole <= j ? home <= hole || home > j : home <= hole && home > j) {
        cells[hole] = cells[j]!
        hole = j
      }
    }
    cells[hole] = 0
    this.head = (this.head + 1) & (this.capacity - 1)
    this.count--
  }

  private grow(): void {
    const capacity = this.capacity * 2
    const words = new Uint32Array(4 * capacity)
    const mask = this.capacity - 1
    for (let i = 0; i < this.count; i++) {
      const from = 4 * ((this.head + i) & mask)
      words.set(this.words.subarray(from, from + 4), 4 * i)
    }
    this.words = words
    this.capacity = capacity
    this.head = 0
    this.table = new Int32Array(2 * capacity)
    for (let i = 0; i < this.count; i++) {
      this.insertCell(hashWords(words[4 * i]!, words[4 * i + 1]!, words[4 * i + 2]!, words[4 * i + 3]!), i)
    }
  }
}
