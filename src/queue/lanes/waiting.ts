/**
 * The lanes' waiting keys: the FIFO of keys queued for a slot, and which of them a freed slot goes
 * to: the FIFO's head, or once priorities are in use the highest ranked (`priorityIndex.ts`).
 * Internal to `src/queue` (below `scheduler.ts`).
 *
 * **Keys alone.** Lanes of their own (not the command queue's: no group, no ranking) queue a new
 * string key behind `aloneFrom` others as the key alone: no entry, its place in a queue of places
 * (`Places`: chunks of 16,384, 8 bytes a key, never copied) holding the number of its record in the
 * key table, which holds the key itself; its entry is made when it is taken off the queue (no probe
 * of the table: the place names the record) or looked up (`cancel`), young, so that a burst
 * of a million queued keys touches ~8 bytes of fresh memory a key here instead of an entry of ~96
 * (issue 12's million-key row: a fresh page costs ~20 µs on the bench machine). Once that queue
 * holds anything, every key queued goes behind it (an entry too, by its place: `seq`), so the order
 * stays first come, first served. A place is stale when its key left the queue since (cancelled:
 * its entry's `seq` no longer names the place or the record, or the record no longer holds the key):
 * `take` passes over it. A sweep of the table renumbers records: the places follow (`renumber`).
 */
import { Fifo } from "../fifo.js"
import type { Entry, Ranking } from "./entry.js"
import { QUEUED } from "./entry.js"
import type { CapacityGroup } from "./group.js"
import { type KeyTable, type Renumbered, renumbered } from "./keyTable.js"
import { PriorityIndex } from "./priorityIndex.js"

/** Places a chunk (128 KiB of pointers: V8 allocates it in its large-object space, where nothing is copied). */
const CHUNK = 1 << 14
const MASK = CHUNK - 1

/** What a place holds: the key table's record of a key alone (-1: gone in a sweep), or an entry. */
type Placed<K> = number | Entry<K>

/** Records of keys alone, or entries, queued by place: 1, 2, ...; `take` from the front. */
class Places<K> {
  private chunks: Array<Array<Placed<K> | undefined>> = []
  /** The place of `chunks[0][0]`. */
  private first = 1
  /** The next place to take, and the next to give. */
  head = 1
  tail = 1

  /** Appends `v`; returns its place. */
  push(v: Placed<K>): number {
    const p = this.tail++
    const i = p - this.first
    if (i >>> 14 === this.chunks.length) this.chunks.push(new Array<Placed<K> | undefined>(CHUNK).fill(undefined))
    this.chunks[i >>> 14]![i & MASK] = v
    return p
  }

  /** What is queued at place `p` (not taken yet). */
  at(p: number): Placed<K> {
    const i = p - this.first
    return this.chunks[i >>> 14]![i & MASK]!
  }

  set(p: number, v: Placed<K>): void {
    const i = p - this.first
    this.chunks[i >>> 14]![i & MASK] = v
  }

  /** Drops what is at the head (there is something). */
  shift(): void {
    const i = this.head++ - this.first
    this.chunks[i >>> 14]![i & MASK] = undefined
    if ((i & MASK) === MASK) {
      this.chunks.shift()
      this.first += CHUNK
    }
  }

  /** Drops everything (every place left is stale). */
  reset(): void {
    this.chunks = []
    this.first = 1
    this.head = 1
    this.tail = 1
  }
}

/** The keys queued for a slot, oldest first (linked through their entries' `prev`/`next`, then by place). */
export class WaitingKeys<K> {
  readonly fifo = new Fifo<Entry<K>>()
  /** Made by `prioritize()`: the same keys by rank. */
  private index: PriorityIndex<K> | undefined = undefined
  /** Keys alone, and entries queued behind them; the FIFO's keys go first. */
  private readonly places = new Places<K>()
  /** Keys queued in `places` that are not stale. */
  private inPlaces = 0
  /** The key table (keys alone have their place there). */
  table: KeyTable<K> | undefined = undefined

  constructor(
    private readonly group: CapacityGroup | undefined,
    private readonly ranking: Ranking<K> | undefined,
    /** Waiting keys beyond which a new string key is queued alone (`Infinity`: never). */
    readonly aloneFrom = Number.POSITIVE_INFINITY
  ) {}

  /** The oldest waiting key, if any (the FIFO's: see `any` for keys alone). */
  get head(): Entry<K> | undefined {
    return this.fifo.head
  }

  /** Is any key waiting? */
  get any(): boolean {
    return this.fifo.head !== undefined || this.inPlaces > 0
  }

  /** Does a key queued now go by place (keys alone wait there)? */
  get byPlace(): boolean {
    return this.places.head !== this.places.tail
  }

  /** The key table's records were renumbered by a sweep: the places of keys alone follow. */
  readonly renumber = (moved: Renumbered): void => {
    const places = this.places
    for (let p = places.head; p < places.tail; p++) {
      const v = places.at(p)
      if (typeof v === "number" && v >= 0) places.set(p, renumbered(moved, v))
    }
  }

  /** Queues string `key` alone (no entry: its place holds its record in the table, which holds the key). */
  pushAlone(key: K): void {
    this.places.push(this.table!.acquireAlone(key as string))
    this.inPlaces++
  }

  /** Queues `e` at the tail (its place in its group's order, if any). */
  push(e: Entry<K>): void {
    e.state = QUEUED
    if (this.byPlace) {
      e.seq = this.places.push(e)
      this.inPlaces++
      return
    }
    if (this.group !== undefined) e.seq = ++this.group.seq
    else if (this.aloneFrom !== Number.POSITIVE_INFINITY) e.seq = 0 // not by place (a record hint goes)
    this.fifo.push(e)
    if (this.index !== undefined) this.index.push(e)
  }

  /** Takes `e` (QUEUED) out, wherever it stands. */
  unlink(e: Entry<K>): void {
    if (this.inPlaces > 0 && this.group === undefined && e.seq !== 0) {
      // by place: the place goes stale
      e.seq = 0
      if (--this.inPlaces === 0) this.places.reset()
      return
    }
    this.fifo.unlink(e)
    if (this.index !== undefined) this.index.remove(e)
  }

  /** The entry queued at place `p` as `v` (a key alone's record, or an entry), or `undefined` if the place is stale. */
  private entryAt(v: Placed<K>, p: number): Entry<K> | undefined {
    if (typeof v === "number") return v >= 0 ? this.table!.takeUp(v) : undefined
    return v.state === QUEUED && v.seq === p ? v : undefined
  }

  /** The entry at the head of the places, passing over stale ones (there is one). */
  private takePlaced(): Entry<K> {
    for (;;) {
      const p = this.places.head
      // read before it is cleared: the table's probe for a key alone reads the key at its place
      const e = this.entryAt(this.places.at(p), p)
      this.places.shift()
      if (e === undefined) continue
      if (e.seq > 0) e.seq = 0
      if (--this.inPlaces === 0) this.places.reset()
      return e
    }
  }

  /** Takes the key a freed slot goes to off the queue (there is one): the head, or the highest ranked. */
  take(): Entry<K> {
    const index = this.index
    if (index === undefined) {
      const e = this.fifo.head
      if (e === undefined) return this.takePlaced()
      this.fifo.unlink(e)
      return e
    }
    const e = index.pick()
    this.fifo.unlink(e)
    index.remove(e)
    return e
  }

  /** From now on a freed slot goes to the queued key ranked highest (first in the FIFO on ties). */
  prioritize(): void {
    if (this.index !== undefined || this.ranking === undefined) return
    this.index = new PriorityIndex(this.ranking)
    for (let e = this.fifo.head; e !== undefined; e = e.next) this.index.push(e)
  }

  /** What the ranking says of `e` may have changed: ranked again if it waits. */
  rerank(e: Entry<K>): void {
    if (this.index !== undefined && e.state === QUEUED) this.index.rerank(e)
  }

  /** Empties the queue; returns what stood in it, oldest first (their links cleared). */
  takeAll(): Array<Entry<K>> {
    const out: Array<Entry<K>> = []
    for (let e = this.fifo.head; e !== undefined;) {
      const next = e.next
      e.prev = undefined
      e.next = undefined
      out.push(e)
      e = next
    }
    this.fifo.head = undefined
    this.fifo.tail = undefined
    if (this.index !== undefined) this.index.clear()
    while (this.inPlaces > 0) out.push(this.takePlaced())
    this.places.reset()
    return out
  }

  /** The queued keys, in FIFO order. */
  keys(): Array<K> {
    const out: Array<K> = []
    for (let e = this.fifo.head; e !== undefined; e = e.next) out.push(e.key)
    const places = this.places
    for (let p = places.head; p < places.tail; p++) {
      const v = places.at(p)
      const key = typeof v === "number" ? (v >= 0 ? this.table!.aloneAt(v) : undefined) : this.entryAt(v, p)?.key
      if (key !== undefined) out.push(key)
    }
    return out
  }
}
