/**
 * The delivery queue's in-memory view of pending entries: one FIFO per recipient `(channel, to)`,
 * singly linked and kept in `seq` order, plus an index by id. Internal to `DeliveryQueue`; plain
 * mutable state owned by one queue. Appending in seq order is O(1); only an entry put back by
 * `retryDead` (older than the tail) walks the list. `AppendOrder` admits appended entries in seq order.
 */
import type { DeliveryEntry, OutboundMessage } from "./types.js"

/** A log call that must succeed before the head entry of a recipient may move on. */
export type LogOp =
  | { readonly _tag: "Ack" }
  | { readonly _tag: "Attempt"; readonly error: string; readonly nextAttemptAt: number; readonly dead: boolean }
  | { readonly _tag: "Dead"; readonly reason: string }

/** One pending entry held in memory. */
export interface Node {
  entry: DeliveryEntry
  next: Node | undefined
  /** `deliver` runs for it now. */
  inFlight: boolean
  /** A log call still owed (it failed before); retried at `opRetryAt`. */
  op: LogOp | undefined
  opFailures: number
  opRetryAt: number
  /** Read from the log at start and not attempted since: its first attempt is paced (`replay`). */
  replayed: boolean
  /** Its "attempt started" mark is durable already (written with the ack of the entry ahead of it). */
  premarked: boolean
}

/** One recipient with pending entries. It exists exactly as long as it holds an entry or is awake. */
export interface Recipient {
  readonly key: string
  head: Node | undefined
  tail: Node | undefined
  /** Woken in the lanes (queued or running) and not yet past its activation's decision to stop. */
  awake: boolean
  /** The time of this recipient's live wake in the timer heap. */
  wakeAt: number | undefined
}

/** Recipients are keyed by `(channel, to)`; JSON keeps the pair unambiguous whatever the strings hold. */
export const recipientKey = (message: OutboundMessage): string => JSON.stringify([message.channel, message.to])

/** When the head may next be worked on: its owed log call's retry time, or its `nextAttemptAt` (0: now). */
export const dueAt = (node: Node): number => (node.op !== undefined ? node.opRetryAt : (node.entry.nextAttemptAt ?? 0))

/** A head being delivered, or owing its log record, keeps its place: nothing goes ahead of it. */
const pinned = (node: Node) => node.inFlight || node.op !== undefined

/** Every recipient's FIFO, and every held entry by id. */
export class Recipients {
  /** Insertion order = order of each recipient's oldest held entry at the time it appeared. */
  readonly byKey = new Map<string, Recipient>()
  readonly byId = new Map<string, Node>()

  /** Takes `entry` in at its seq place within its recipient; returns the recipient. */
  insert(entry: DeliveryEntry): Recipient {
    const node: Node = {
      entry,
      next: undefined,
      inFlight: false,
      op: undefined,
      opFailures: 0,
      opRetryAt: 0,
      replayed: false,
      premarked: false
    }
    const key = recipientKey(entry.message)
    let rec = this.byKey.get(key)
    if (rec === undefined) {
      rec = { key, head: undefined, tail: undefined, awake: false, wakeAt: undefined }
      this.byKey.set(key, rec)
    }
    this.byId.set(entry.id, node)
    const seq = entry.seq
    if (rec.tail === undefined) {
      rec.head = rec.tail = node
    } else if (rec.tail.entry.seq < seq) {
      rec.tail.next = node
      rec.tail = node
    } else if (!pinned(rec.head!) && seq < rec.head!.entry.seq) {
      node.next = rec.head
      rec.head = node
    } else {
      // Rare (retryDead of an older entry): walk to its place, never ahead of a head being worked on.
      let prev = rec.head!
      while (prev.next !== undefined && prev.next.entry.seq < seq) prev = prev.next
      node.next = prev.next
      prev.next = node
      if (node.next === undefined) rec.tail = node
    }
    return rec
  }

  /** Drops the head of `rec` (acked, dead, or gone from the log). */
  removeHead(rec: Recipient): void {
    const node = rec.head!
    rec.head = node.next
    node.next = undefined
    if (rec.head === undefined) rec.tail = undefined
    this.byId.delete(node.entry.id)
  }

  /** Forgets `rec` if it holds nothing (an idle recipient keeps no state). */
  release(rec: Recipient): void {
    if (rec.head === undefined && !rec.awake && this.byKey.get(rec.key) === rec) this.byKey.delete(rec.key)
  }
}

/**
 * Admits appended entries in seq order, whatever order the log's appends take their seq in and complete
 * in. Each append takes a ticket when it starts. An entry that returned may only be admitted once every
 * append that had started before it returned has completed: those are the only ones that can hold a
 * lower seq (seq is assigned during the call, increasing). Once they have, every completed entry up to
 * its seq is safe too, and they are released together, sorted by seq. The buffer holds at most the
 * appends in flight; the common case (one at a time) releases at once.
 */
export class AppendOrder {
  private taken = 0
  /** Every ticket below `prefix` has completed. */
  private prefix = 0
  private readonly doneEarly = new Set<number>()
  private buffered: Array<{ readonly entry: DeliveryEntry; readonly waitFor: number }> = []

  /** A ticket for an append about to start. */
  take(): number {
    return this.taken++
  }

  /** The append of `ticket` completed (with `entry` to admit, or none); returns the entries now safe, in seq order. */
  settle(ticket: number, entry: DeliveryEntry | undefined): ReadonlyArray<DeliveryEntry> {
    if (entry !== undefined) this.buffered.push({ entry, waitFor: this.taken })
    this.doneEarly.add(ticket)
    while (this.doneEarly.delete(this.prefix)) this.prefix++
    let frontier = -Infinity
    for (const b of this.buffered) if (b.waitFor <= this.prefix && b.entry.seq > frontier) frontier = b.entry.seq
    if (frontier === -Infinity) return []
    const ready: Array<DeliveryEntry> = []
    const keep: typeof this.buffered = []
    for (const b of this.buffered) {
      if (b.entry.seq <= frontier) ready.push(b.entry)
      else keep.push(b)
    }
    this.buffered = keep
    return ready.length > 1 ? ready.sort((x, y) => x.seq - y.seq) : ready
  }
}
