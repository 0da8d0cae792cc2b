/**
 * The live (pending and dead) entries of the log, by id, in seq order: the part of `Map<string,
 * EntryData>` the log uses, without a `Map`. Entries sit in an array in insertion order (append
 * order, which is seq order); ids are found through an open-addressing table of array indices in one
 * typed array (slot and hash side by side: one cache line per probe; linear probing, load at most 1/2,
 * backward-shift deletion), keyed by a 32-bit hash of the id checked against the entry's own id on a
 * hit. The log's ids are random UUIDs: their first eight hex digits are 32 random bits, and serve as
 * the hash (any other id is hashed whole). Adding an entry is a hash of its id and two
 * typed-array stores, where a `Map` that grows into old space paid a store into a large backing
 * store, its rehashing and the write barrier of every entry it points to. Removed entries leave a hole
 * in the array until holes outnumber the entries (then it is packed again, amortised O(1)).
 */
import type { EntryData } from "./entryData.js"
import { parseUuid } from "./uuidWords.js"

const MIN_CAPACITY = 1024

const scratch = new Uint32Array(4)

/** The value of a lowercase hex digit's char code, or -1. */
const hexValue = (c: number): number => (c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : -1)

/** Spread the hash's bits (the table uses the low ones). */
const mix = (h: number): number => {
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b)
  return h ^ (h >>> 13)
}

/**
 * The hash of an id: the first 32 bits of a UUID (its first eight lowercase hex digits), mixed; FNV-1a
 * over the UTF-16 code units of any other id. Exported for tests.
 */
export const hashId = (id: string): number => {
  if (id.length === 36 && id.charCodeAt(8) === 45) {
    let h = 0
    let i = 0
    for (; i < 8; i++) {
      const v = hexValue(id.charCodeAt(i))
      if (v < 0) break
      h = (h << 4) | v
    }
    if (i === 8) return mix(h)
  }
  let h = 0x811c9dc5
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193)
  return mix(h)
}

/** Live entries by id, iterated in insertion order. */
export class LiveEntries {
  /** Entries in insertion order; `undefined` where one was removed. */
  private entries: Array<EntryData | undefined> = []
  private holes = 0
  /** Per table slot `i`: `[2i]` the index in `entries` + 1 (0: empty), `[2i + 1]` the hash of its id. */
  private table: Int32Array
  /** Slots - 1 (a power of two minus one). */
  private mask: number
  /** Number of entries. */
  size = 0

  constructor(capacity = MIN_CAPACITY) {
    let cap = MIN_CAPACITY
    while (cap < capacity * 2) cap *= 2
    this.table = new Int32Array(2 * cap)
    this.mask = cap - 1
  }

  /** The table slot holding `id`, or -1. */
  private find(id: string, h: number): number {
    const t = this.table
    const mask = this.mask
    for (let i = h & mask;; i = (i + 1) & mask) {
      const s = t[2 * i]!
      if (s === 0) return -1
      if (t[2 * i + 1] === h && this.entries[s - 1]!.id === id) return i
    }
  }

  get(id: string): EntryData | undefined {
    const i = this.find(id, hashId(id))
    return i < 0 ? undefined : this.entries[this.table[2 * i]! - 1]
  }

  has(id: string): boolean {
    return this.find(id, hashId(id)) >= 0
  }

  /** `has` of a canonical lowercase UUID given as its 128 bits (replay reads them from the bytes): no string made. */
  hasUuid(words: Uint32Array): boolean {
    if (this.size === 0) return false
    const h = mix(words[0]! | 0)
    const t = this.table
    const mask = this.mask
    for (let i = h & mask;; i = (i + 1) & mask) {
      const s = t[2 * i]!
      if (s === 0) return false
      if (
        t[2 * i + 1] === h && parseUuid(this.entries[s - 1]!.id, scratch) && scratch.every((w, k) => w === words[k])
      ) {
        return true
      }
    }
  }

  /** Add `entry` under its id, which must not be here yet (callers check `has`, or made the id). */
  add(entry: EntryData): void {
    if ((this.size + 1) * 2 > this.mask + 1) this.grow()
    const h = hashId(entry.id)
    const t = this.table
    const mask = this.mask
    let i = h & mask
    while (t[2 * i] !== 0) i = (i + 1) & mask
    t[2 * i] = this.entries.push(entry)
    t[2 * i + 1] = h
    this.size++
  }

  /** Remove the entry of `id`; false if there is none. */
  delete(id: string): boolean {
    const t = this.table
    const mask = this.mask
    let i = this.find(id, hashId(id))
    if (i < 0) return false
    this.entries[t[2 * i]! - 1] = undefined
    this.holes++
    this.size--
    // Backward-shift: pull later entries of the probe run back over the freed slot.
    for (let j = (i + 1) & mask; t[2 * j] !== 0; j = (j + 1) & mask) {
      const home = t[2 * j + 1]! & mask
      // Stays if its home lies cyclically in (i, j].
      if (i <= j ? i < home && home <= j : i < home || home <= j) continue
      t[2 * i] = t[2 * j]!
      t[2 * i + 1] = t[2 * j + 1]!
      i = j
    }
    t[2 * i] = 0
    if (this.holes > MIN_CAPACITY && this.holes > this.size) this.pack()
    return true
  }

  /** Entries in insertion order, in a new array. */
  list(): Array<EntryData> {
    const out: Array<EntryData> = []
    const entries = this.entries
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]
      if (e !== undefined) out.push(e)
    }
    return out
  }

  /** Entries in insertion order. */
  *values(): IterableIterator<EntryData> {
    const entries = this.entries
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i]
      if (e !== undefined) yield e
    }
  }

  /** Double the table, re-placing every slot by its stored hash. */
  private grow(): void {
    const old = this.table
    const cap = (this.mask + 1) * 2
    const t = new Int32Array(2 * cap)
    const mask = cap - 1
    for (let k = 0; k < old.length; k += 2) {
      const s = old[k]!
      if (s === 0) continue
      const h = old[k + 1]!
      let i = h & mask
      while (t[2 * i] !== 0) i = (i + 1) & mask
      t[2 * i] = s
      t[2 * i + 1] = h
    }
    this.table = t
    this.mask = mask
  }

  /** Drop the holes: entries move down (order kept) and the table's indices follow. */
  private pack(): void {
    const old = this.entries
    const moved = new Int32Array(old.length + 1)
    const entries: Array<EntryData | undefined> = []
    for (let k = 0; k < old.length; k++) {
      const e = old[k]
      if (e !== undefined) moved[k + 1] = entries.push(e)
    }
    const t = this.table
    for (let k = 0; k < t.length; k += 2) if (t[k] !== 0) t[k] = moved[t[k]!]!
    this.entries = entries
    this.holes = 0
  }
}
