/**
 * A ring of 128-bit ids in ack order (typed arrays, no object per id), found through an
 * open-addressing table of ring slots, with ack times as runs (acks of one millisecond share one).
 * The base of the dedupe window (ackedWindow.ts): `KeyedRing` adds columns per slot.
 *
 * Ids the log makes are lowercase `randomUUID`s: a canonical UUID and its 128 bits are one-to-one
 * (uuidWords.ts), so a lookup never confuses two ids.
 */

import { hashWords, parseUuid, scratch } from "./uuidWords.js"

/**
 * Open addressing over ring slots: a cell holds slot + 1 (0: empty), linear probing, backward-shift
 * deletion (no tombstones). `home(slot)` is the hash of what the slot holds.
 */
export class SlotTable {
  cells: Int32Array
  constructor(
    cellCount: number,
    private readonly home: (slot: number) => number
  ) {
    this.cells = new Int32Array(cellCount)
  }

  insert(hash: number, slot: number): void {
    const cells = this.cells
    const mask = cells.length - 1
    let i = hash & mask
    while (cells[i] !== 0) i = (i + 1) & mask
    cells[i] = slot + 1
  }

  /** Remove `slot`, whose hash is `hash`; later cells of its probe run move into the hole where they may live. */
  remove(hash: number, slot: number): void {
    const cells = this.cells
    const mask = cells.length - 1
    let i = hash & mask
    while (cells[i] !== slot + 1) i = (i + 1) & mask
    let hole = i
    for (let j = (i + 1) & mask; cells[j] !== 0; j = (j + 1) & mask) {
      const home = this.home(cells[j]! - 1) & mask
      // The cell at j may move to `hole` if its home is not in (hole, j] (cyclically).
      if (hole <= j ? home <= hole || home > j : home <= hole && home > j) {
        cells[hole] = cells[j]!
        hole = j
      }
    }
    cells[hole] = 0
  }

  /** Empty, with `cellCount` cells. */
  reset(cellCount: number): void {
    this.cells = new Int32Array(cellCount)
  }
}

/**
 * A table's `cells` (slot + 1, 0: empty) of a ring whose oldest id is at slot `head`, renumbered as if
 * it were at slot 0 (ack order), into `into` (may be `cells`: in place). The ring's capacity is half
 * the cell count.
 */
export const inAckOrder = (cells: Int32Array, head: number, into: Int32Array): Int32Array => {
  if (head === 0) {
    if (into !== cells) into.set(cells)
    return into
  }
  const mask = cells.length / 2 - 1
  for (let i = 0; i < cells.length; i++) {
    const v = cells[i]!
    into[i] = v === 0 ? 0 : ((v - 1 - head) & mask) + 1
  }
  return into
}

/** A column of per-slot values: `stride` values a slot. */
export type Column = Uint32Array | Uint8Array | Int32Array | Float64Array

const MIN_CAPACITY = 1024

/** The smallest power of two ≥ `n` (and ≥ the minimum capacity). */
export const capacityFor = (n: number): number => {
  let c = MIN_CAPACITY
  while (c < n) c *= 2
  return c
}

/**
 * `column` (stride values a slot, from slot 0) in a new array with room for `capacity` slots, or
 * `column` itself when it has exactly that room (a restore's: the caller gives it up).
 */
export const grown = <C extends Column>(column: C, stride: number, capacity: number): C => {
  if (column.length === stride * capacity) return column
  const out = new (column.constructor as new(n: number) => C)(stride * capacity)
  out.set(column.subarray(0, Math.min(column.length, stride * capacity)))
  return out
}

/** Ack times in ack order as runs: `count[i]` ids acked at `at[i]`, oldest first from `head`. */
export interface Runs {
  readonly at: ReadonlyArray<number>
  readonly count: ReadonlyArray<number>
}

/**
 * The ring: slot `(head + i) & (capacity - 1)` holds the i-th oldest id. Subclasses keep more
 * columns per slot (`columns`, re-laid out on growth with the ids) and more tables (`rebuild`).
 */
export class IdRing {
  protected capacity: number
  protected head = 0
  count = 0
  /** 4 words per slot. */
  protected words: Uint32Array
  protected readonly ids: SlotTable
  private runAt: Array<number> = []
  private runCount: Array<number> = []
  private runHead = 0

  constructor(capacity = MIN_CAPACITY) {
    this.capacity = capacityFor(capacity)
    this.words = new Uint32Array(4 * this.capacity)
    this.ids = new SlotTable(2 * this.capacity, (slot) => this.hashSlot(slot))
  }

  protected hashSlot(slot: number): number {
    const w = this.words
    const s = 4 * slot
    return hashWords(w[s]!, w[s + 1]!, w[s + 2]!, w[s + 3]!)
  }

  /** The slot of the i-th oldest id. */
  protected slotAt(i: number): number {
    return (this.head + i) & (this.capacity - 1)
  }

  /** The ring slot holding these words, or -1. */
  find(a: number, b: number, c: number, d: number): number {
    const cells = this.ids.cells
    const mask = cells.length - 1
    const w = this.words
    for (let i = hashWords(a, b, c, d) & mask;; i = (i + 1) & mask) {
      const v = cells[i]!
      if (v === 0) return -1
      const s = 4 * (v - 1)
      if (w[s] === a && w[s + 1] === b && w[s + 2] === c && w[s + 3] === d) return v - 1
    }
  }

  /** Is this canonical id held? */
  hasId(id: string): boolean {
    return parseUuid(id, scratch) && this.find(scratch[0]!, scratch[1]!, scratch[2]!, scratch[3]!) >= 0
  }

  /** Room for `n` ids without growing (open reads the count before the ids). */
  reserve(n: number): void {
    if (n > this.capacity) this.resize(capacityFor(n))
  }

  /** Append the id (not held: the caller checked) acked at `at`; returns its slot. */
  protected push(a: number, b: number, c: number, d: number, at: number): number {
    if (this.count === this.capacity) this.resize(this.capacity * 2)
    const slot = this.slotAt(this.count)
    const w = this.words
    w[4 * slot] = a
    w[4 * slot + 1] = b
    w[4 * slot + 2] = c
    w[4 * slot + 3] = d
    this.count++
    this.ids.insert(hashWords(a, b, c, d), slot)
    const last = this.runAt.length - 1
    if (last >= this.runHead && this.runAt[last] === at) this.runCount[last]!++
    else {
      this.runAt.push(at)
      this.runCount.push(1)
    }
    return slot
  }

  /** Called with the oldest slot before it leaves. */
  protected forget(_slot: number): void {}

  /** Forget ids acked `windowMs` or more before `now`, oldest first; returns how many left. */
  evictBefore(now: number, windowMs: number): number {
    let gone = 0
    while (this.runHead < this.runAt.length && now - this.runAt[this.runHead]! >= windowMs) {
      const n = this.runCount[this.runHead]!
      for (let i = 0; i < n; i++) this.removeOldest()
      gone += n
      this.runHead++
    }
    if (this.runHead > 1024 && this.runHead * 2 > this.runAt.length) {
      this.runAt = this.runAt.slice(this.runHead)
      this.runCount = this.runCount.slice(this.runHead)
      this.runHead = 0
    }
    return gone
  }

  private removeOldest(): void {
    const slot = this.head
    this.forget(slot)
    this.ids.remove(this.hashSlot(slot), slot)
    this.head = (this.head + 1) & (this.capacity - 1)
    this.count--
  }

  /** The runs still in the ring (copies). */
  runs(): Runs {
    return { at: this.runAt.slice(this.runHead), count: this.runCount.slice(this.runHead) }
  }

  /** The columns a subclass keeps per slot, with their strides (re-laid out on growth). */
  protected columns(): ReadonlyArray<readonly [Column, number]> {
    return []
  }

  /** Take the re-laid-out columns (same order as `columns`). */
  protected setColumns(_columns: ReadonlyArray<Column>): void {}

  /** After growth: refill the subclass's own tables from slots 0..count-1. */
  protected rebuild(): void {}

  /** A copy of `column` (stride values a slot) in ring order from slot 0, with room for `capacity` slots. */
  protected inOrder<C extends Column>(column: C, stride: number, capacity: number): C {
    const out = new (column.constructor as new(n: number) => C)(stride * capacity)
    const first = Math.min(this.count, this.capacity - this.head)
    out.set(column.subarray(stride * this.head, stride * (this.head + first)), 0)
    if (first < this.count) out.set(column.subarray(0, stride * (this.count - first)), stride * first)
    return out
  }

  /**
   * `column` in ring order from the oldest id as one view of the ring's own array, or two when its ids
   * wrap around the end (no copy): valid until the ring next changes.
   */
  protected pieces<C extends Column>(column: C, stride: number): Array<C> {
    const h = this.head
    const first = Math.min(this.count, this.capacity - h)
    const out = [column.subarray(stride * h, stride * (h + first)) as C]
    if (first < this.count) out.push(column.subarray(0, stride * (this.count - first)) as C)
    return out
  }

  private resize(capacity: number): void {
    const cols = this.columns().map(([c, stride]) => this.inOrder(c, stride, capacity))
    this.words = this.inOrder(this.words, 4, capacity)
    this.setColumns(cols)
    this.capacity = capacity
    this.head = 0
    this.ids.reset(2 * capacity)
    for (let i = 0; i < this.count; i++) this.ids.insert(this.hashSlot(i), i)
    this.rebuild()
  }

  /**
   * `table`'s cells with the slots renumbered as `inOrder` lays them out (a checkpoint stores it, so
   * that a restore need not insert every id again), if a ring refilled with these ids gets this
   * capacity again; otherwise `undefined`.
   */
  protected tableInOrder(table: SlotTable): Int32Array | undefined {
    const cells = this.tableAsIs(table)
    if (cells === undefined) return undefined
    return inAckOrder(cells, this.head, new Int32Array(cells.length))
  }

  /**
   * `table` itself (no copy, valid until the ring changes), its slot numbers counted from slot 0 while
   * the oldest id is at `head` (`inAckOrder` renumbers it), if a ring refilled with these ids gets this
   * capacity again; otherwise `undefined`.
   */
  protected tableAsIs(table: SlotTable): Int32Array | undefined {
    return this.capacity === capacityFor(this.count) ? table.cells : undefined
  }

  /** The id table in ack order (see `tableInOrder`). */
  idTable(): Int32Array | undefined {
    return this.tableInOrder(this.ids)
  }

  /**
   * Refill an empty ring from ids in ack order (`words`, 4 a slot) and their runs (what a checkpoint
   * holds); `columns(capacity)` gives the subclass's columns sized for the capacity chosen. Arrays
   * sized for that capacity (`capacityFor(count)` slots) are taken as they are, not copied.
   */
  protected load(
    words: Uint32Array,
    count: number,
    runs: Runs,
    columns: (capacity: number) => ReadonlyArray<Column>,
    /** The id table as `idTable` gave it (used if it fits). */
    table?: Int32Array
  ): void {
    const capacity = capacityFor(count)
    this.words = grown(words, 4, capacity)
    this.capacity = capacity
    this.head = 0
    this.count = count
    this.setColumns(columns(capacity))
    if (table !== undefined && table.length === 2 * capacity) this.ids.cells = table
    else {
      this.ids.reset(2 * capacity)
      for (let i = 0; i < count; i++) this.ids.insert(this.hashSlot(i), i)
    }
    this.runAt = runs.at.slice()
    this.runCount = runs.count.slice()
    this.runHead = 0
    this.rebuild()
  }
}

/** A plain ring's ids in ack order, their runs, and (a checkpoint's) its id table (`idTable`). */
export interface PlainColumns {
  readonly count: number
  readonly words: Uint32Array
  readonly runs: Runs
  readonly table?: Int32Array | undefined
}

/** A plain ring as a checkpoint's capture writes it at once: views of its arrays, valid until it changes. */
export interface PlainView {
  readonly count: number
  /** The ids in ack order: one view, or two when they wrap around the ring's end. */
  readonly words: ReadonlyArray<Uint32Array>
  readonly runs: Runs
  /** The id table as it is (`tableAsIs`), its slot numbers from slot 0 while the oldest id is at `head`. */
  readonly table: Int32Array | undefined
  readonly head: number
}

/** Ids acked within the window whose entry had no key: just the ids and their ack times (~24 bytes an id). */
export class PlainRing extends IdRing {
  /** Remember an id acked at `at` (unless held already). */
  add(a: number, b: number, c: number, d: number, at: number): void {
    if (this.find(a, b, c, d) < 0) this.push(a, b, c, d, at)
  }

  /** The ids in ack order (a copy, 4 words an id) and their runs. */
  copy(): PlainColumns {
    return { count: this.count, words: this.inOrder(this.words, 4, this.count), runs: this.runs() }
  }

  /** The ring as views of its arrays (no copy): valid until it changes. */
  view(): PlainView {
    const table = this.tableAsIs(this.ids)
    return { count: this.count, words: this.pieces(this.words, 4), runs: this.runs(), table, head: this.head }
  }

  /** Replace an empty ring's content by a copy (a checkpoint's). */
  restore(c: PlainColumns): void {
    this.load(c.words, c.count, c.runs, () => [], c.table)
  }
}
