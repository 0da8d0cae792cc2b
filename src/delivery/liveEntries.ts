/**
 * The live (pending and dead) entries of the log, by id, in seq order: the part of `Map<string,
 * EntryData>` the log uses, without a `Map`. Entries sit in an array in insertion order (append
 * order, which is seq order); ids are found through an open-addressing table of array indices over
 * typed arrays (linear probing, load at most 1/2, backward-shift deletion), keyed by a 32-bit hash
 * of the id checked against the entry's own id on a hit. Adding an entry is a hash of its id and two
 * typed-array stores, where a `Map` that grows into old space paid a store into a large backing
 * store, its rehashing and the write barrier of every entry it points to. Removed entries leave a hole
 * in the array until holes outnumber the entries (then it is packed again, amortised O(1)).
 */
import type { EntryData } from "./payload.js"

const MIN_CAPACITY = 1024

/** FNV-1a over the UTF-16 code units, then a final mix (random ids make it uniform; any id works). Exported for tests. */
export const hashId = (id: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193)
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  return h ^ (h >>> 13)
}

/** Live entries by id, iterated in insertion order. */
export class LiveEntries {
  /** Entries in insertion order; `undefined` where one was removed. */
  private entries: Array<EntryData | undefined> = []
  private holes = 0
  /** Table slot -> index in `entries` + 1 (0: empty). */
  private slots: Int32Array
  /** Table slot -> hash of that entry's id. */
  private hashes: Int32Array
  private mask: number
  /** Number of entries. */
  size = 0

  constructor(capacity = MIN_CAPACITY) {
    let cap = MIN_CAPACITY
    while (cap < capacity * 2) cap *= 2
    this.slots = new Int32Array(cap)
    this.hashes = new Int32Array(cap)
    this.mask = cap - 1
  }

  /** The table slot holding `id`, or -1. */
  private find(id: string, h: number): number {
    const slots = this.slots
    const mask = this.mask
    for (let i = h & mask;; i = (i + 1) & mask) {
      const s = slots[i]!
      if (s === 0) return -1
      if (this.hashes[i] === h && this.entries[s - 1]!.id === id) return i
    }
  }

  get(id: string): EntryData | undefined {
    const i = this.find(id, hashId(id))
    return i < 0 ? undefined : this.entries[this.slots[i]! - 1]
  }

  has(id: string): boolean {
    return this.find(id, hashId(id)) >= 0
  }

  /** Add `entry` under its id, which must not be here yet (callers check `has`, or made the id). */
  add(entry: EntryData): void {
    if ((this.size + 1) * 2 > this.slots.length) this.grow()
    const h = hashId(entry.id)
    const slots = this.slots
    const mask = this.mask
    let i = h & mask
    while (slots[i] !== 0) i = (i + 1) & mask
    slots[i] = this.entries.push(entry)
    this.hashes[i] = h
    this.size++
  }

  /** Remove the entry of `id`; false if there is none. */
  delete(id: string): boolean {
    const slots = this.slots
    const hashes = this.hashes
    const mask = this.mask
    let i = this.find(id, hashId(id))
    if (i < 0) return false
    this.entries[slots[i]! - 1] = undefined
    this.holes++
    this.size--
    // Backward-shift: pull later entries of the probe run back over the freed slot.
    for (let j = (i + 1) & mask; slots[j] !== 0; j = (j + 1) & mask) {
      const home = hashes[j]! & mask
      // Stays if its home lies cyclically in (i, j].
      if (i <= j ? i < home && home <= j : i < home || home <= j) continue
      slots[i] = slots[j]!
      hashes[i] = hashes[j]!
      i = j
    }
    slots[i] = 0
    if (this.holes > MIN_CAPACITY && this.holes > this.size) this.pack()
    return true
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
    const oldSlots = this.slots
    const oldHashes = this.hashes
    const cap = oldSlots.length * 2
    const slots = new Int32Array(cap)
    const hashes = new Int32Array(cap)
    const mask = cap - 1
    for (let k = 0; k < oldSlots.length; k++) {
      const s = oldSlots[k]!
      if (s === 0) continue
      const h = oldHashes[k]!
      let i = h & mask
      while (slots[i] !== 0) i = (i + 1) & mask
      slots[i] = s
      hashes[i] = h
    }
    this.slots = slots
    this.hashes = hashes
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
    const slots = this.slots
    for (let i = 0; i < slots.length; i++) if (slots[i] !== 0) slots[i] = moved[slots[i]!]!
    this.entries = entries
    this.holes = 0
  }
}
