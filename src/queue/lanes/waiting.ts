/**
 * The lanes' waiting keys: the FIFO of keys queued for a slot, and which of them a freed slot goes
 * to. Internal to `src/queue` (below `scheduler.ts`).
 */
import { Fifo } from "../fifo.js"
import type { Entry, InternalOptions } from "./entry.js"
import { QUEUED } from "./entry.js"
import type { CapacityGroup } from "./group.js"

/** The keys queued for a slot, oldest first (linked through their entries' `prev`/`next`). */
export class WaitingKeys<K> {
  readonly fifo = new Fifo<Entry<K>>()
  /** `prioritize()` was called: a freed slot goes to the highest ranked key. */
  private prioritized = false

  constructor(
    private readonly group: CapacityGroup | undefined,
    private readonly rank: InternalOptions<K>["rank"]
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
  }

  /** Takes `e` (QUEUED) out, wherever it stands. */
  unlink(e: Entry<K>): void {
    this.fifo.unlink(e)
  }

  /** Takes the key a freed slot goes to off the queue (there is one). */
  take(): Entry<K> {
    const e = this.next()
    this.fifo.unlink(e)
    return e
  }

  /** From now on a freed slot goes to the queued key `rank` ranks highest (first in the FIFO on ties). */
  prioritize(): void {
    this.prioritized = true
  }

  /** The queued entry a freed slot goes to: the FIFO's head, or the highest ranked (first on ties). */
  private next(): Entry<K> {
    let best = this.fifo.head!
    if (!this.prioritized || this.rank === undefined) return best
    const rankOf = this.rank()
    let bestRank = rankOf(best.key)
    for (let e = best.next; e !== undefined; e = e.next) {
      const r = rankOf(e.key)
      if (r > bestRank) {
        best = e
        bestRank = r
      }
    }
    return best
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
    return out
  }

  /** The queued keys, in FIFO order. */
  keys(): Array<K> {
    const out: Array<K> = []
    for (let e = this.fifo.head; e !== undefined; e = e.next) out.push(e.key)
    return out
  }
}
