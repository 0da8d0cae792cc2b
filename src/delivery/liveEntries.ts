/**
 * The live (pending and dead) entries of the log, by id, in seq order: the part of `Map<string,
 * EntryData>` the log uses, without a `Map`, and for most entries without an object.
 *
 * Every entry has a slot (a number, reused from a free list once its entry left). An entry appended
 * by this process with a canonical id, no idempotency key, its text in the texts' arena and a fresh
 * delivery state (the common one, and the one that stays pending while a producer outpaces the
 * delivery) is held **by slot only**: its id's 128 bits, seq, time, place, size, text's chunk and
 * offset and its flags in typed arrays, nothing in the JavaScript heap (each such entry used to be an
 * `EntryData`, an id string and two array slots, ~194 bytes that the young generation's collector copied
 * while a batch ran). Any other entry (replayed, keyed, with attempts, an id of another shape) is its
 * `EntryData` object in `objects[slot]`, as before; a slot-only entry becomes one when a call changes
 * more than its flags (`get`: an attempt, a dead letter), and readers get fresh copies or `DeliveryEntry`s
 * made from the slot.
 *
 * Ids are found through an open-addressing table of slots in one typed array (slot and hash side by
 * side: one cache line per probe; linear probing, load at most 1/2, backward-shift deletion), keyed by a
 * 32-bit hash of the id checked against the entry's own id on a hit. The log's ids are random UUIDs:
 * their first eight hex digits are 32 random bits, and serve as the hash (any other id is hashed
 * whole). Insertion order (append order, which is seq order) is an array of slots; removed entries leave
 * a hole there until holes outnumber the entries (then it is packed again, amortised O(1)).
 */
import type { EntryData } from "./entryData.js"
import {
  ASCII,
  COMMITTED,
  DEAD,
  type EntryList,
  FrozenEntries,
  OBJECT,
  plainEntry,
  STARTED,
  uuidText
} from "./entrySlots.js"
import { utf8Bytes, writeId } from "./payload.js"
import { TextArena, type TextChunk } from "./textArena.js"
import type { DeliveryEntry, OutboundMessage } from "./types.js"
import { hexValue, parseUuid, writeUuidWords } from "./uuidWords.js"

export type { EntryList } from "./entrySlots.js"

const MIN_CAPACITY = 1024

const scratch = new Uint32Array(4)
/** The looked-up id's 128 bits (`find`). */
const sought = new Uint32Array(4)
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

// An object entry's flags.
const isDead = (e: EntryData): boolean => e.status === "dead"
const isCommitted = (e: EntryData): boolean => e.committed
const isStarted = (e: EntryData): boolean => e.started
const commit = (e: EntryData): void => {
  e.committed = true
}
const start = (e: EntryData): void => {
  e.started = true
}

/** Live entries by id, iterated in insertion order. */
export class LiveEntries {
  /** Number of entries. */
  size = 0
  /** Per table cell `i`: `[2i]` the slot + 1 (0: empty), `[2i + 1]` the hash of its id. */
  private table: Int32Array
  /** Cells - 1 (a power of two minus one). */
  private mask: number

  /** Slots in insertion order; -1 where an entry was removed. */
  private order: Int32Array
  private orderLength = 0
  private holes = 0
  /** Per slot: its index in `order`. */
  private orderAt: Int32Array
  /** Free slots (a stack), and slots ever used. */
  private free: Int32Array
  private freeCount = 0
  private used = 0

  // Per slot (a slot-only entry's fields; of an object entry only `flags` and `words`' first word).
  private flags: Uint8Array
  /** The id's 128 bits, four words a slot. */
  private words: Uint32Array
  private seqs: Float64Array
  private times: Float64Array
  private places: Float64Array
  private sizes: Float64Array
  /** The text's chunk number, offset and bytes in the arena. */
  private chunks: Int32Array
  private textAts: Int32Array
  private textBytes: Int32Array
  /** The entries held as objects (`OBJECT`); `undefined` for the others. */
  private objects: Array<EntryData | undefined>

  /** The arena the slot-only entries' texts are in (the state's). */
  readonly texts: TextArena

  constructor(capacity = MIN_CAPACITY, texts?: TextArena) {
    let cap = MIN_CAPACITY
    while (cap < capacity * 2) cap *= 2
    this.table = new Int32Array(2 * cap)
    this.mask = cap - 1
    const slots = cap / 2
    this.order = new Int32Array(slots)
    this.orderAt = new Int32Array(slots)
    this.free = new Int32Array(slots)
    this.flags = new Uint8Array(slots)
    this.words = new Uint32Array(4 * slots)
    this.seqs = new Float64Array(slots)
    this.times = new Float64Array(slots)
    this.places = new Float64Array(slots)
    this.sizes = new Float64Array(slots)
    this.chunks = new Int32Array(slots)
    this.textAts = new Int32Array(slots)
    this.textBytes = new Int32Array(slots)
    this.objects = Array.from({ length: slots }, () => undefined)
    this.texts = texts ?? new TextArena()
    this.texts.numbered = this
  }

  // ---- lookup ----

  /** Does slot `s` hold `id` (`canonical`: `id` is a UUID whose bits are in `sought`)? */
  private holds(s: number, id: string): boolean {
    if ((this.flags[s]! & OBJECT) !== 0) return this.objects[s]!.id === id
    // A slot-only entry: the looked-up id's bits, parsed once per lookup (`sought`; 2: not yet, 0: not canonical).
    if (this.parsed === 2) this.parsed = parseUuid(id, sought) ? 1 : 0
    if (this.parsed === 0) return false
    const w = this.words
    return w[4 * s] === sought[0] && w[4 * s + 1] === sought[1] && w[4 * s + 2] === sought[2] &&
      w[4 * s + 3] === sought[3]
  }

  /** Whether `sought` holds the bits of the id being looked up (`holds`): 2 not parsed yet, 1 yes, 0 not a canonical id. */
  private parsed = 2

  /** The table cell holding `id`, or -1. */
  private find(id: string, h: number): number {
    const t = this.table
    const mask = this.mask
    this.parsed = 2
    for (let i = h & mask;; i = (i + 1) & mask) {
      const s = t[2 * i]!
      if (s === 0) return -1
      if (t[2 * i + 1] === h && this.holds(s - 1, id)) return i
    }
  }

  /** The slot of `id`, or -1. A slot stays the entry's until it is deleted. */
  slotOf(id: string): number {
    if (this.size === 0) return -1
    // A call looks its id up more than once (its check, then the state's change): the last one found is kept.
    if (id === this.lastId) return this.lastSlot
    const i = this.find(id, hashId(id))
    if (i < 0) return -1
    this.lastId = id
    return (this.lastSlot = this.table[2 * i]! - 1)
  }

  /** The id `slotOf` found last and its slot (forgotten when an entry is removed). */
  private lastId: string | undefined = undefined
  private lastSlot = -1

  has(id: string): boolean {
    return this.slotOf(id) >= 0
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
      if (t[2 * i + 1] !== h) continue
      if ((this.flags[s - 1]! & OBJECT) !== 0) {
        if (parseUuid(this.objects[s - 1]!.id, scratch) && scratch.every((w, k) => w === words[k])) return true
      } else {
        const w = this.words
        const b = 4 * (s - 1)
        if (w[b] === words[0] && w[b + 1] === words[1] && w[b + 2] === words[2] && w[b + 3] === words[3]) return true
      }
    }
  }

  /**
   * The entry of `id` as an object the caller may change (a slot-only entry becomes an object entry
   * now: use `slotOf` and the slot's readers where nothing changes but the flags).
   */
  get(id: string): EntryData | undefined {
    const s = this.slotOf(id)
    return s < 0 ? undefined : this.object(s)
  }

  /** The entry in slot `s` as an object the caller may change (made one if it was slot-only). */
  object(s: number): EntryData {
    if ((this.flags[s]! & OBJECT) !== 0) return this.objects[s]!
    const e = this.copy(s, false)
    this.texts.own(e, this.chunks[s]!, this.textAts[s]!, this.textBytes[s]!, (this.flags[s]! & ASCII) !== 0)
    this.objects[s] = e
    this.flags[s] = OBJECT
    return e
  }

  // ---- adding and removing ----

  /** A free slot, the table cell for hash `h` (the id is not here) and its place in insertion order. */
  private take(h: number): number {
    if ((this.size + 1) * 2 > this.mask + 1) this.grow()
    const s = this.freeCount > 0 ? this.free[--this.freeCount]! : this.used++
    const t = this.table
    const mask = this.mask
    let i = h & mask
    while (t[2 * i] !== 0) i = (i + 1) & mask
    t[2 * i] = s + 1
    t[2 * i + 1] = h
    if (this.orderLength === this.order.length) this.packOrGrowOrder()
    this.orderAt[s] = this.orderLength
    this.order[this.orderLength++] = s
    this.size++
    return s
  }

  /** Add `entry` under its id, which must not be here yet (callers check `has`, or made the id); returns its slot. */
  add(entry: EntryData): number {
    const s = this.take(hashId(entry.id))
    this.flags[s] = OBJECT
    this.objects[s] = entry
    // The hash's bits, as `hasUuid` compares them first for a canonical id (not needed: kept simple).
    return s
  }

  /**
   * Add a slot-only entry (see the file's comment): an id (its bits `id[0..4)`) not here yet, a pending
   * entry without key whose text is the arena's chunk `chunk` at `textAt` (`textBytes` bytes). Returns its slot.
   */
  addPlain(
    id: Uint32Array,
    seq: number,
    enqueuedAt: number,
    pos: number,
    bytes: number,
    chunk: number,
    textAt: number,
    textBytes: number,
    ascii: boolean,
    committed: boolean
  ): number {
    const s = this.take(mix(id[0]! | 0))
    this.flags[s] = (ascii ? ASCII : 0) | (committed ? COMMITTED : 0)
    const w = this.words
    w[4 * s] = id[0]!
    w[4 * s + 1] = id[1]!
    w[4 * s + 2] = id[2]!
    w[4 * s + 3] = id[3]!
    this.seqs[s] = seq
    this.times[s] = enqueuedAt
    this.places[s] = pos
    this.sizes[s] = bytes
    this.chunks[s] = chunk
    this.textAts[s] = textAt
    this.textBytes[s] = textBytes
    return s
  }

  /** Remove the entry of `id`; false if there is none. */
  delete(id: string): boolean {
    const i = this.find(id, hashId(id))
    if (i < 0) return false
    this.removeCell(i)
    return true
  }

  /** Remove the entry in slot `s` (a slot-only entry's text is released in the arena; an object's is the caller's). */
  deleteSlot(s: number): void {
    const t = this.table
    const mask = this.mask
    const h = (this.flags[s]! & OBJECT) !== 0 ? hashId(this.objects[s]!.id) : mix(this.words[4 * s]! | 0)
    let i = h & mask
    while (t[2 * i] !== s + 1) i = (i + 1) & mask
    this.removeCell(i)
  }

  private removeCell(i: number): void {
    const t = this.table
    const mask = this.mask
    const s = t[2 * i]! - 1
    this.lastId = undefined
    if ((this.flags[s]! & OBJECT) === 0) this.texts.releasePlaced(this.chunks[s]!, this.textBytes[s]!)
    this.objects[s] = undefined
    this.flags[s] = 0
    this.order[this.orderAt[s]!] = -1
    this.holes++
    this.free[this.freeCount++] = s
    this.size--
    // Backward-shift: pull later cells of the probe run back over the freed one.
    for (let j = (i + 1) & mask; t[2 * j] !== 0; j = (j + 1) & mask) {
      const home = t[2 * j + 1]! & mask
      // Stays if its home lies cyclically in (i, j].
      if (i <= j ? i < home && home <= j : i < home || home <= j) continue
      t[2 * i] = t[2 * j]!
      t[2 * i + 1] = t[2 * j + 1]!
      i = j
    }
    t[2 * i] = 0
    t[2 * i + 1] = 0
  }

  // ---- a slot's fields (valid until the slot is deleted) ----

  /** Slot `s` is held as an object (`object(s)`). */
  isObject(s: number): boolean {
    return (this.flags[s]! & OBJECT) !== 0
  }

  /** Flag `bit` of a slot-only entry, or what `of` reads of an object entry. */
  private flag(s: number, bit: number, of: (e: EntryData) => boolean): boolean {
    const f = this.flags[s]!
    return (f & OBJECT) !== 0 ? of(this.objects[s]!) : (f & bit) !== 0
  }

  /** Set flag `bit` of a slot-only entry, or what `on` sets of an object entry. */
  private setFlag(s: number, bit: number, on: (e: EntryData) => void): void {
    if ((this.flags[s]! & OBJECT) !== 0) on(this.objects[s]!)
    else this.flags[s]! |= bit
  }

  isDead(s: number): boolean {
    return this.flag(s, DEAD, isDead)
  }

  isCommitted(s: number): boolean {
    return this.flag(s, COMMITTED, isCommitted)
  }

  /** Its append record is durable. */
  setCommitted(s: number): void {
    this.setFlag(s, COMMITTED, commit)
  }

  isStarted(s: number): boolean {
    return this.flag(s, STARTED, isStarted)
  }

  /** An attempt of it started (`applyStarted`). */
  setStarted(s: number): void {
    this.setFlag(s, STARTED, start)
  }

  /** Its idempotency key (a slot-only entry has none). */
  keyOf(s: number): string | undefined {
    return (this.flags[s]! & OBJECT) !== 0 ? this.objects[s]!.key : undefined
  }

  /** The bytes counted as its live weight. */
  bytesOf(s: number): number {
    return (this.flags[s]! & OBJECT) !== 0 ? this.objects[s]!.bytes : this.sizes[s]!
  }

  /** Where its record is (addresses.ts), -1 if not known. */
  posOf(s: number): number {
    return (this.flags[s]! & OBJECT) !== 0 ? this.objects[s]!.pos : this.places[s]!
  }

  setPos(s: number, pos: number): void {
    if ((this.flags[s]! & OBJECT) !== 0) this.objects[s]!.pos = pos
    else this.places[s] = pos
  }

  /** A slot-only entry's id bits into `out[0..4)`; false for an object entry. */
  wordsOf(s: number, out: Uint32Array): boolean {
    if ((this.flags[s]! & OBJECT) !== 0) return false
    const w = this.words
    out[0] = w[4 * s]!
    out[1] = w[4 * s + 1]!
    out[2] = w[4 * s + 2]!
    out[3] = w[4 * s + 3]!
    return true
  }

  /** Its id (a slot-only entry's made from its bits). */
  idOf(s: number): string {
    if ((this.flags[s]! & OBJECT) !== 0) return this.objects[s]!.id
    return uuidText(this.words, s)
  }

  /** Write its id as a record holds it (length byte, then the text) at `buf[at]`; returns its end. */
  writeId(s: number, buf: Buffer, at: number): number {
    if ((this.flags[s]! & OBJECT) !== 0) return writeId(buf, at, this.objects[s]!.id, utf8Bytes(this.objects[s]!.id))
    const w = this.words
    buf[at] = 36
    writeUuidWords(buf, at + 1, w[4 * s]!, w[4 * s + 1]!, w[4 * s + 2]!, w[4 * s + 3]!)
    return at + 37
  }

  /** A slot-only entry's text's chunk. */
  private chunkOf(s: number): TextChunk {
    return this.texts.chunk(this.chunks[s]!)
  }

  /** A fresh `DeliveryEntry` of slot `s` (its message parsed from its text, or `message`). */
  toEntry(s: number, message?: OutboundMessage): DeliveryEntry {
    const f = this.flags[s]!
    if ((f & OBJECT) !== 0) return this.objects[s]!.toEntry(message)
    const e: { -readonly [K in keyof DeliveryEntry]: DeliveryEntry[K] } = {
      id: this.idOf(s),
      seq: this.seqs[s]!,
      message: message ??
        (JSON.parse(this.chunkOf(s).text(this.textAts[s]!, this.textBytes[s]!, (f & ASCII) !== 0)) as OutboundMessage),
      enqueuedAt: this.times[s]!,
      attempts: 0,
      status: (f & DEAD) !== 0 ? "dead" : "pending"
    }
    if ((f & STARTED) !== 0) e.maybeSent = true
    return e
  }

  /**
   * A copy of slot `s`'s entry as it is now (an object entry's `clone`); a slot-only entry's copy reads
   * its text from the arena's chunk for as long as it lives (not an owner of it). `clone`: as `EntryData.clone`.
   */
  copy(s: number, clone = true): EntryData {
    const f = this.flags[s]!
    if ((f & OBJECT) !== 0) return clone ? this.objects[s]!.clone() : this.objects[s]!
    return plainEntry(
      this.idOf(s),
      f,
      this.seqs[s]!,
      this.times[s]!,
      this.places[s]!,
      this.sizes[s]!,
      this.chunkOf(s),
      this.textAts[s]!,
      this.textBytes[s]!
    )
  }

  // ---- in order ----

  /** The slots in insertion order (valid until the next add or delete). */
  slots(): Int32Array {
    if (this.holes > 0) this.pack()
    return this.order.subarray(0, this.orderLength)
  }

  /** Entries in insertion order, in a new array: the object entries themselves, copies of the slot-only ones. */
  list(): Array<EntryData> {
    const out: Array<EntryData> = []
    for (const s of this.slots()) out.push(this.copy(s, false))
    return out
  }

  /** Entries in insertion order (as `list`). */
  *values(): IterableIterator<EntryData> {
    yield* this.list()
  }

  /**
   * Every entry as it is now, in insertion order, for compaction to write while the live ones change: the
   * object entries cloned, the slot-only ones' fields copied into typed arrays (no object per entry; `at`
   * makes one when it is read). The same entries as `cloneAll`. It reads texts of chunks the arena may
   * let go meanwhile: the arena recycles none until `texts.unpin()` says the capture is no longer read.
   */
  freeze(): EntryList {
    this.texts.pin()
    const slots = this.slots()
    const n = slots.length
    const flags = new Uint8Array(n)
    const words = new Uint32Array(4 * n)
    const numbers = new Float64Array(4 * n)
    const texts = new Int32Array(2 * n)
    const chunks: Array<TextChunk | undefined> = Array.from({ length: n }, () => undefined)
    const objects: Array<EntryData | undefined> = Array.from({ length: n }, () => undefined)
    const w = this.words
    for (let k = 0; k < n; k++) {
      const s = slots[k]!
      const f = this.flags[s]!
      if ((f & OBJECT) !== 0) {
        objects[k] = this.objects[s]!.clone()
        continue
      }
      flags[k] = f
      words[4 * k] = w[4 * s]!
      words[4 * k + 1] = w[4 * s + 1]!
      words[4 * k + 2] = w[4 * s + 2]!
      words[4 * k + 3] = w[4 * s + 3]!
      numbers[4 * k] = this.seqs[s]!
      numbers[4 * k + 1] = this.times[s]!
      numbers[4 * k + 2] = this.places[s]!
      numbers[4 * k + 3] = this.sizes[s]!
      texts[2 * k] = this.textAts[s]!
      texts[2 * k + 1] = this.textBytes[s]!
      chunks[k] = this.chunkOf(s)
    }
    return new FrozenEntries(n, flags, words, numbers, texts, chunks, objects)
  }

  /** The texts of slot-only entries in `chunks` become strings: each such entry becomes an object entry. */
  ownTexts(chunks: ReadonlyArray<TextChunk>): void {
    const end = this.orderLength
    for (let k = 0; k < end; k++) {
      const s = this.order[k]!
      if (s < 0 || (this.flags[s]! & OBJECT) !== 0) continue
      const c = this.chunks[s]!
      if (!chunks.some((x) => x.no === c)) continue
      const e = this.copy(s, false)
      e.ownText(this.chunkOf(s))
      this.objects[s] = e
      this.flags[s] = OBJECT
    }
  }

  // ---- growing ----

  /** Double the table and the slots' arrays, re-placing every cell by its stored hash. */
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
    const slots = cap / 2
    const more = <T extends Int32Array | Uint8Array | Uint32Array | Float64Array>(a: T, per = 1): T => {
      const b = new (a.constructor as new(n: number) => T)(slots * per)
      b.set(a)
      return b
    }
    this.orderAt = more(this.orderAt)
    this.free = more(this.free)
    this.flags = more(this.flags)
    this.words = more(this.words, 4)
    this.seqs = more(this.seqs)
    this.times = more(this.times)
    this.places = more(this.places)
    this.sizes = more(this.sizes)
    this.chunks = more(this.chunks)
    this.textAts = more(this.textAts)
    this.textBytes = more(this.textBytes)
    for (let s = this.objects.length; s < slots; s++) this.objects.push(undefined)
  }

  /** `order` is full: drop its holes if they are many, else double it. */
  private packOrGrowOrder(): void {
    if (this.holes > MIN_CAPACITY / 4 && this.holes * 2 >= this.orderLength) this.pack()
    else {
      const b = new Int32Array(this.order.length * 2)
      b.set(this.order)
      this.order = b
    }
  }

  /** Drop the holes of `order` (order kept) and the slots' places there follow. */
  private pack(): void {
    const o = this.order
    let n = 0
    for (let k = 0; k < this.orderLength; k++) {
      const s = o[k]!
      if (s < 0) continue
      o[n] = s
      this.orderAt[s] = n++
    }
    this.orderLength = n
    this.holes = 0
  }
}
