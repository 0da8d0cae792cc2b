/**
 * The lanes' waiting keys: the FIFO of keys queued for a slot, and which of them a freed slot goes
 * to: the FIFO's head, or once priorities are in use the highest ranked (`priorityIndex.ts`).
 * Internal to `src/queue` (below `scheduler.ts`).
 */
import { Fifo } from "../fifo.js"
import type { Entry, Ranking } from "./entry.js"
import { QUEUED } from "./entry.js"
import type { CapacityGroup } from "./group.js"
import { PriorityIndex } from "./priorityIndex.js"

/** The keys queued for a slot, oldest first (linked through their entries' `prev`/`next`). */
export class WaitingKeys<K> {
  readonly fifo = new Fifo<Entry<K>>()
  /** Made by `prioritize()`: the same keys by rank. */
  private index: PriorityIndex<K> | undefined = undefined

  constructor(
    private readonly group: CapacityGroup | undefined,
    private readonly ranking: Ranking<K> | undefined
  ) {}

  /** The oldest waiting key, if any. */
  get head(): Entry<K> | undefined {
    return this.fifo.head
  }

  /** Queues `e` at the tail (its place in its group's order, if any). */
  push(e: Entry<K>): void {
    e.state = QUEUED
    if (this.group !== undefined) e.seq = ++this.group.seq
    this.fifo.push(e)
    if (this.index !== undefined) this.index.push(e)
  }

  /** Takes `e` (QUEUED) out, wherever it stands. */
  unlink(e: Entry<K>): void {
    this.fifo.unlink(e)
    if (this.index !== undefined) this.index.remove(e)
  }

  /** Takes the key a freed slot goes to off the queue (there is one): the head, or the highest ranked. */
  take(): Entry<K> {
    const index = this.index
    if (index === undefined) {
      const e = this.fifo.head!
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
    return out
  }

  /** The queued keys, in FIFO order. */
  keys(): Array<K> {
    const out: Array<K> = []
    for (let e = this.fifo.head; e !== undefined; e = e.next) out.push(e.key)
    return out
  }
}
