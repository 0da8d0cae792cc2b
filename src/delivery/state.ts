/**
 * The in-memory state of the delivery log: what replaying every record gives. The live calls change it
 * through the same `apply*` functions that replay uses, so a re-open rebuilds exactly this state.
 * Entries are `EntryData` (payload.ts): the message stays its JSON text until an entry is read.
 */
import type { EntryData } from "./payload.js"

/** First record of a snapshot: where the log goes on after it. */
export interface SnapshotBeginPayload {
  readonly nextSeq: number
  readonly nextLsn: number
  readonly entries: number
  readonly acked: number
}
/** Last record of a snapshot: its record count, this one included (a snapshot without it is corrupt). */
export interface SnapshotEndPayload {
  readonly records: number
}

/** An id acked within the dedupe window; `entry` (as it was when acked) when it had an idempotency key. */
export interface Acked {
  readonly at: number
  readonly entry?: EntryData
  readonly bytes: number
}

const ACKED_BYTES = 80

/** Pending and dead entries in seq order, idempotency keys, and ids acked within the window. */
export class LogState {
  /** Insertion order is append order, which is seq order. */
  readonly live = new Map<string, EntryData>()
  /** idempotencyKey -> id, for live entries and for keyed acked ones. */
  readonly keys = new Map<string, string>()
  /** Insertion order is ack order. */
  readonly acked = new Map<string, Acked>()
  nextSeq = 1
  pending = 0
  dead = 0
  liveBytes = 0

  /** An appended entry, or a snapshot's entry (with its whole state). A second one with the same id is ignored. */
  insert(entry: EntryData): void {
    if (this.live.has(entry.id)) return
    this.insertNew(entry)
  }

  /** `insert` for an id known to be new (a fresh UUID from `append`): one hash lookup less. */
  insertNew(entry: EntryData): void {
    this.live.set(entry.id, entry)
    if (entry.status === "pending") this.pending++
    else this.dead++
    this.liveBytes += entry.bytes
    if (entry.key !== undefined) this.keys.set(entry.key, entry.id)
    if (entry.seq >= this.nextSeq) this.nextSeq = entry.seq + 1
  }

  /** Absolute values: replaying it twice changes nothing. */
  applyAttempt(id: string, attempts: number, lastError: string, nextAttemptAt: number): EntryData | undefined {
    const l = this.live.get(id)
    if (l === undefined) return undefined
    l.attempts = attempts
    l.lastError = lastError
    l.nextAttemptAt = nextAttemptAt
    l.started = false
    return l
  }

  /** An attempt of a pending entry started (its outcome is not known until the next record). */
  applyStarted(id: string): void {
    const l = this.live.get(id)
    if (l !== undefined && l.status === "pending") l.started = true
  }

  /** pending -> dead; `reason` becomes `lastError`, `nextAttemptAt` goes. */
  applyDead(id: string, reason: string): void {
    const l = this.live.get(id)
    if (l === undefined || l.status === "dead") return
    l.status = "dead"
    l.lastError = reason
    l.nextAttemptAt = undefined
    this.pending--
    this.dead++
  }

  /** dead -> pending, attempts 0, no `nextAttemptAt` (`lastError` stays). */
  applyRequeue(id: string): void {
    const l = this.live.get(id)
    if (l === undefined || l.status === "pending") return
    l.status = "pending"
    l.attempts = 0
    l.nextAttemptAt = undefined
    l.started = false
    this.dead--
    this.pending++
  }

  /** The entry leaves; its id (and its entry, if keyed) is remembered for the dedupe window from `at`. */
  applyAck(id: string, at: number): void {
    const l = this.live.get(id)
    if (l === undefined) return
    this.live.delete(id)
    if (l.status === "pending") this.pending--
    else this.dead--
    this.liveBytes -= l.bytes
    if (l.key !== undefined) {
      this.acked.set(id, { at, entry: l, bytes: l.bytes })
      this.liveBytes += l.bytes
    } else {
      this.acked.set(id, { at, bytes: ACKED_BYTES })
      this.liveBytes += ACKED_BYTES
    }
  }

  /** A snapshot's acked id. */
  applyAcked(id: string, at: number, entry: EntryData | undefined, bytes: number): void {
    if (entry !== undefined) {
      this.acked.set(id, { at, entry, bytes })
      if (entry.key !== undefined) this.keys.set(entry.key, id)
      if (entry.seq >= this.nextSeq) this.nextSeq = entry.seq + 1
    } else {
      this.acked.set(id, { at, bytes })
    }
    this.liveBytes += bytes
  }

  /** Forget ids acked `windowMs` or more before `now` (oldest first; amortised O(1) per ack). */
  evict(now: number, windowMs: number): void {
    for (const [id, a] of this.acked) {
      if (now - a.at < windowMs) return
      this.acked.delete(id)
      this.liveBytes -= a.bytes
      const key = a.entry?.key
      if (key !== undefined && this.keys.get(key) === id) this.keys.delete(key)
    }
  }
}
