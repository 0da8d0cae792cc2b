/**
 * The keyed part of the dedupe window: ids acked within the window whose entry had an
 * idempotency key. Per id, besides its 128 bits: a 64-bit digest of the key, where the entry's
 * record lives (file number and offset: an append record, or a snapshot's entry), its size and
 * whether an attempt was started — about 49 bytes an id with the two tables, where a `Map` of
 * the whole entry took ~570. A key is found by its digest and then checked against the record
 * (the caller reads it): a digest shared by two keys costs a read, never a lost message.
 */
import { type Column, grown, IdRing, type Runs, SlotTable } from "./idRing.js"

/** Flag bits of a keyed id. */
export const KeyedFlag = { started: 1 } as const

/** A keyed id's columns in ack order (a snapshot's or checkpoint's copy). */
export interface KeyedColumns {
  readonly count: number
  /** 4 words an id. */
  readonly words: Uint32Array
  /** 2 words an id. */
  readonly digests: Uint32Array
  readonly files: Uint32Array
  readonly offsets: Uint32Array
  readonly bytes: Uint32Array
  readonly flags: Uint8Array
  readonly runs: Runs
  /** A checkpoint's: the id and digest tables in ack order (`tables`), used on restore if they fit. */
  readonly tables?: readonly [ids: Int32Array | undefined, digests: Int32Array | undefined] | undefined
}

/** A keyed ring as a checkpoint's capture writes it at once: views of its arrays (see `PlainView`). */
export interface KeyedView {
  readonly count: number
  /** Each column in ack order: one view, or two when the ids wrap around the ring's end. */
  readonly words: ReadonlyArray<Uint32Array>
  readonly digests: ReadonlyArray<Uint32Array>
  readonly files: ReadonlyArray<Uint32Array>
  readonly offsets: ReadonlyArray<Uint32Array>
  readonly bytes: ReadonlyArray<Uint32Array>
  readonly flags: ReadonlyArray<Uint8Array>
  readonly runs: Runs
  /** The id and digest tables as they are, their slot numbers from slot 0 while the oldest id is at `head`. */
  readonly tables: readonly [ids: Int32Array | undefined, digests: Int32Array | undefined]
  readonly head: number
}

export class KeyedRing extends IdRing {
  private digests: Uint32Array
  private files: Uint32Array
  private offsets: Uint32Array
  private sizes: Uint32Array
  private flagBits: Uint8Array
  private readonly byDigest: SlotTable
  /** Bytes of the ids forgotten by the current `evict`. */
  private freed = 0

  constructor(capacity?: number) {
    super(capacity)
    const n = this.capacity
    this.digests = new Uint32Array(2 * n)
    this.files = new Uint32Array(n)
    this.offsets = new Uint32Array(n)
    this.sizes = new Uint32Array(n)
    this.flagBits = new Uint8Array(n)
    this.byDigest = new SlotTable(2 * n, (slot) => this.digests[2 * slot]!)
  }

  /** Remember an id (unless held already) with its key's digest and its record's place. */
  add(
    id: Uint32Array,
    at: number,
    digest: Uint32Array,
    file: number,
    offset: number,
    bytes: number,
    flags: number
  ): void {
    if (this.find(id[0]!, id[1]!, id[2]!, id[3]!) >= 0) return
    const slot = this.push(id[0]!, id[1]!, id[2]!, id[3]!, at)
    this.digests[2 * slot] = digest[0]!
    this.digests[2 * slot + 1] = digest[1]!
    this.files[slot] = file
    this.offsets[slot] = offset
    this.sizes[slot] = bytes
    this.flagBits[slot] = flags
    this.byDigest.insert(digest[0]!, slot)
  }

  /** Slots whose key has this digest, newest first (almost always none or one). */
  withDigest(d0: number, d1: number): Array<number> {
    const cells = this.byDigest.cells
    const mask = cells.length - 1
    const out: Array<number> = []
    for (let i = d0 & mask; cells[i] !== 0; i = (i + 1) & mask) {
      const slot = cells[i]! - 1
      if (this.digests[2 * slot] === d0 && this.digests[2 * slot + 1] === d1) out.push(slot)
    }
    const age = (slot: number): number => (slot - this.head) & (this.capacity - 1)
    if (out.length > 1) out.sort((x, y) => age(y) - age(x))
    return out
  }

  fileOf(slot: number): number {
    return this.files[slot]!
  }
  offsetOf(slot: number): number {
    return this.offsets[slot]!
  }
  flagsOf(slot: number): number {
    return this.flagBits[slot]!
  }
  bytesOf(slot: number): number {
    return this.sizes[slot]!
  }

  /** Does any id have its record in a file numbered below `below` (the file code's number)? */
  anyFileBelow(below: number): boolean {
    for (let i = 0; i < this.count; i++) if ((this.files[this.slotAt(i)]! & 0x7fff_ffff) < below) return true
    return false
  }
  /** The id of `slot` in `out[0..4)`. */
  idOf(slot: number, out: Uint32Array): void {
    out.set(this.words.subarray(4 * slot, 4 * slot + 4))
  }

  /** The record of `slot` moved (a compaction copied it into its snapshot). */
  relocate(slot: number, file: number, offset: number): void {
    this.files[slot] = file
    this.offsets[slot] = offset
  }

  /** Forget ids acked `windowMs` or more before `now`; returns the bytes they counted for. */
  evict(now: number, windowMs: number): number {
    this.freed = 0
    this.evictBefore(now, windowMs)
    return this.freed
  }

  protected override forget(slot: number): void {
    this.freed += this.sizes[slot]!
    this.byDigest.remove(this.digests[2 * slot]!, slot)
  }

  protected override columns(): ReadonlyArray<readonly [Column, number]> {
    return [[this.digests, 2], [this.files, 1], [this.offsets, 1], [this.sizes, 1], [this.flagBits, 1]]
  }

  protected override setColumns(c: ReadonlyArray<Column>): void {
    this.digests = c[0] as Uint32Array
    this.files = c[1] as Uint32Array
    this.offsets = c[2] as Uint32Array
    this.sizes = c[3] as Uint32Array
    this.flagBits = c[4] as Uint8Array
  }

  /** A restore's digest table, used by the `rebuild` that follows if it fits. */
  private given: Int32Array | undefined

  protected override rebuild(): void {
    const given = this.given
    this.given = undefined
    if (given !== undefined && given.length === 2 * this.capacity) {
      this.byDigest.cells = given
      return
    }
    this.byDigest.reset(2 * this.capacity)
    for (let i = 0; i < this.count; i++) this.byDigest.insert(this.digests[2 * i]!, i)
  }

  /** Every column in ack order (copies). */
  copy(): KeyedColumns {
    const n = this.count
    return {
      count: n,
      words: this.inOrder(this.words, 4, n),
      digests: this.inOrder(this.digests, 2, n),
      files: this.inOrder(this.files, 1, n),
      offsets: this.inOrder(this.offsets, 1, n),
      bytes: this.inOrder(this.sizes, 1, n),
      flags: this.inOrder(this.flagBits, 1, n),
      runs: this.runs()
    }
  }

  /** The ring as views of its arrays (no copy): valid until it changes. */
  view(): KeyedView {
    return {
      count: this.count,
      words: this.pieces(this.words, 4),
      digests: this.pieces(this.digests, 2),
      files: this.pieces(this.files, 1),
      offsets: this.pieces(this.offsets, 1),
      bytes: this.pieces(this.sizes, 1),
      flags: this.pieces(this.flagBits, 1),
      runs: this.runs(),
      tables: [this.tableAsIs(this.ids), this.tableAsIs(this.byDigest)],
      head: this.head
    }
  }

  /** The id and digest tables in ack order, for a checkpoint (see `tableInOrder`). */
  tables(): readonly [Int32Array | undefined, Int32Array | undefined] {
    return [this.idTable(), this.tableInOrder(this.byDigest)]
  }

  /** Replace an empty ring's content by a copy (a checkpoint's). */
  restore(c: KeyedColumns): void {
    this.given = c.tables?.[1]
    this.load(c.words, c.count, c.runs, (capacity) => [
      grown(c.digests, 2, capacity),
      grown(c.files, 1, capacity),
      grown(c.offsets, 1, capacity),
      grown(c.bytes, 1, capacity),
      grown(c.flags, 1, capacity)
    ], c.tables?.[0])
  }
}
