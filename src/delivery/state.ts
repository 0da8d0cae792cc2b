/**
 * The in-memory state of the delivery log: what replaying every record gives. The live calls change it
 * through the same `apply*` functions that replay uses, so a re-open rebuilds exactly this state.
 */
import type { DeliveryEntry, OutboundMessage } from "./types.js"

/** Payload of an `append` record (and, with `attempts` etc., of a snapshot entry). */
export interface AppendPayload {
  readonly id: string
  readonly seq: number
  readonly enqueuedAt: number
  readonly message: OutboundMessage
}
/** Payload of an `attempt` record: absolute values, so replaying it twice changes nothing. */
export interface AttemptPayload {
  readonly id: string
  readonly attempts: number
  readonly lastError: string
  readonly nextAttemptAt: number
}
/** Payload of an `ack` record; `at` starts the dedupe window. */
export interface AckPayload {
  readonly id: string
  readonly at: number
}
/** Payload of a `dead` record; `reason` becomes `lastError`. */
export interface DeadPayload {
  readonly id: string
  readonly reason: string
}
/** Payload of a `requeue` record: dead -> pending, attempts 0. */
export interface RequeuePayload {
  readonly id: string
}
/** A snapshot's record of an id acked within the dedupe window; `entry` when it had an idempotency key. */
export interface AckedPayload {
  readonly id: string
  readonly at: number
  readonly entry?: DeliveryEntry
}
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

/** A pending or dead entry; `committed` once its append record is durable (reads hide it before). */
export interface Live {
  entry: DeliveryEntry
  committed: boolean
  /** Bytes its latest state takes in a snapshot, roughly: counted as live weight. */
  bytes: number
}

/** An id acked within the dedupe window. */
export interface Acked {
  readonly at: number
  readonly entry?: DeliveryEntry
  readonly bytes: number
}

const ACKED_BYTES = 80

/** Pending and dead entries in seq order, idempotency keys, and ids acked within the window. */
export class LogState {
  /** Insertion order is append order, which is seq order. */
  readonly live = new Map<string, Live>()
  /** idempotencyKey -> id, for live entries and for keyed acked ones. */
  readonly keys = new Map<string, string>()
  /** Insertion order is ack order. */
  readonly acked = new Map<string, Acked>()
  nextSeq = 1
  pending = 0
  dead = 0
  liveBytes = 0

  applyAppend(p: AppendPayload, bytes: number, committed: boolean): DeliveryEntry {
    const entry: DeliveryEntry = {
      id: p.id,
      seq: p.seq,
      message: p.message,
      enqueuedAt: p.enqueuedAt,
      attempts: 0,
      status: "pending"
    }
    this.insert(entry, bytes, committed)
    return entry
  }

  /** Replay of an append record: the parsed payload object becomes the entry (one allocation less per entry). */
  replayAppend(p: AppendPayload, bytes: number): void {
    const entry = p as { -readonly [K in keyof DeliveryEntry]: DeliveryEntry[K] }
    entry.attempts = 0
    entry.status = "pending"
    this.insert(entry, bytes, true)
  }

  /** A snapshot entry: the full state of a pending or dead entry. */
  applyEntry(entry: DeliveryEntry, bytes: number): void {
    this.insert(entry, bytes, true)
  }

  private insert(entry: DeliveryEntry, bytes: number, committed: boolean): void {
    if (this.live.has(entry.id)) return
    this.live.set(entry.id, { entry, committed, bytes })
    if (entry.status === "pending") this.pending++
    else this.dead++
    this.liveBytes += bytes
    const key = entry.message.idempotencyKey
    if (key !== undefined) this.keys.set(key, entry.id)
    if (entry.seq >= this.nextSeq) this.nextSeq = entry.seq + 1
  }

  applyAttempt(p: AttemptPayload): DeliveryEntry | undefined {
    const l = this.live.get(p.id)
    if (l === undefined) return undefined
    l.entry = { ...l.entry, attempts: p.attempts, lastError: p.lastError, nextAttemptAt: p.nextAttemptAt }
    return l.entry
  }

  applyDead(p: DeadPayload): void {
    const l = this.live.get(p.id)
    if (l === undefined || l.entry.status === "dead") return
    const { nextAttemptAt: _, ...rest } = l.entry
    l.entry = { ...rest, lastError: p.reason, status: "dead" }
    this.pending--
    this.dead++
  }

  applyRequeue(p: RequeuePayload): void {
    const l = this.live.get(p.id)
    if (l === undefined || l.entry.status === "pending") return
    const { nextAttemptAt: _, ...rest } = l.entry
    l.entry = { ...rest, attempts: 0, status: "pending" }
    this.dead--
    this.pending++
  }

  applyAck(p: AckPayload): void {
    const l = this.live.get(p.id)
    if (l === undefined) return
    this.live.delete(p.id)
    if (l.entry.status === "pending") this.pending--
    else this.dead--
    this.liveBytes -= l.bytes
    const key = l.entry.message.idempotencyKey
    if (key !== undefined) {
      this.acked.set(p.id, { at: p.at, entry: l.entry, bytes: l.bytes })
      this.liveBytes += l.bytes
    } else {
      this.acked.set(p.id, { at: p.at, bytes: ACKED_BYTES })
      this.liveBytes += ACKED_BYTES
    }
  }

  applyAcked(p: AckedPayload, bytes: number): void {
    if (p.entry !== undefined) {
      this.acked.set(p.id, { at: p.at, entry: p.entry, bytes })
      const key = p.entry.message.idempotencyKey
      if (key !== undefined) this.keys.set(key, p.id)
      if (p.entry.seq >= this.nextSeq) this.nextSeq = p.entry.seq + 1
    } else {
      this.acked.set(p.id, { at: p.at, bytes })
    }
    this.liveBytes += bytes
  }

  /** Forget ids acked `windowMs` or more before `now` (oldest first; amortised O(1) per ack). */
  evict(now: number, windowMs: number): void {
    for (const [id, a] of this.acked) {
      if (now - a.at < windowMs) return
      this.acked.delete(id)
      this.liveBytes -= a.bytes
      const key = a.entry?.message.idempotencyKey
      if (key !== undefined && this.keys.get(key) === id) this.keys.delete(key)
    }
  }
}
