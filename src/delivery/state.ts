/**
 * The in-memory state of the delivery log: what replaying every record gives. The live calls change it
 * through the same `apply*` functions that replay uses, so a re-open rebuilds exactly this state.
 * Entries are `EntryData` (payload.ts): the message stays its JSON text until an entry is read.
 */
import { AckedWindow } from "./ackedWindow.js"
import { Addresses } from "./addresses.js"
import type { EntryData } from "./entryData.js"
import type { KeyDigest } from "./keyDigest.js"
import { LiveEntries } from "./liveEntries.js"
import { TextArena } from "./textArena.js"

/** First record of a snapshot: where the log goes on after it. */
export interface SnapshotBeginPayload {
  readonly nextSeq: number
  readonly nextLsn: number
  readonly entries: number
  readonly acked: number
  /** Of `acked`, how many have no entry (written since the keyed ring came; sizes the window before the ids). */
  readonly plain?: number
}
/** Last record of a snapshot: its record count, this one included (a snapshot without it is corrupt). */
export interface SnapshotEndPayload {
  readonly records: number
}

/** Scratch for a located record: file code, offset. */
const place = new Uint32Array(2)
/** Scratch for an acked id's bits. */
const ackedId = new Uint32Array(4)

/** Pending and dead entries in seq order, idempotency keys, and ids acked within the window. */
export class LogState {
  /** The texts of appended entries (textArena.ts). */
  readonly texts = new TextArena()
  /** Insertion order is append order, which is seq order. */
  readonly live = new LiveEntries(undefined, this.texts)
  /** idempotencyKey -> id, for live entries and for acked ones kept with their entry (not the keyed ring's). */
  readonly keys = new Map<string, string>()
  /** Ids acked within the window, in ack order (keyed ones by their key's digest and record's place). */
  readonly acked: AckedWindow
  /** Where the records of `EntryData.pos` are. */
  addresses = new Addresses()
  nextSeq = 1
  pending = 0
  dead = 0
  liveBytes = 0

  constructor(digest?: KeyDigest) {
    this.acked = new AckedWindow(digest)
  }

  /** An appended entry, or a snapshot's entry (with its whole state). A second one with the same id is ignored. */
  insert(entry: EntryData): void {
    if (this.live.has(entry.id)) return
    this.insertNew(entry)
  }

  /** `insert` for an id known to be new (a fresh UUID from `append`): one hash lookup less. Returns its slot. */
  insertNew(entry: EntryData): number {
    const slot = this.live.add(entry)
    if (entry.status === "pending") this.pending++
    else this.dead++
    this.liveBytes += entry.bytes
    if (entry.key !== undefined) this.keys.set(entry.key, entry.id)
    if (entry.seq >= this.nextSeq) this.nextSeq = entry.seq + 1
    return slot
  }

  /** Count a fresh pending entry without key just added to `live` slot-only (`LiveEntries.addPlain`). */
  addedPlain(seq: number, bytes: number): void {
    this.pending++
    this.liveBytes += bytes
    if (seq >= this.nextSeq) this.nextSeq = seq + 1
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
    const s = this.live.slotOf(id)
    if (s >= 0 && !this.live.isDead(s)) this.live.setStarted(s)
  }

  /** pending -> dead; `reason` becomes `lastError`, `nextAttemptAt` goes. */
  applyDead(id: string, reason: string): void {
    const s = this.live.slotOf(id)
    if (s < 0 || this.live.isDead(s)) return
    const l = this.live.object(s)
    l.status = "dead"
    l.lastError = reason
    l.nextAttemptAt = undefined
    this.pending--
    this.dead++
  }

  /** dead -> pending, attempts 0, no `nextAttemptAt` (`lastError` stays). */
  applyRequeue(id: string): void {
    const s = this.live.slotOf(id)
    if (s < 0 || !this.live.isDead(s)) return
    const l = this.live.object(s)
    l.status = "pending"
    l.attempts = 0
    l.nextAttemptAt = undefined
    l.started = false
    this.dead--
    this.pending++
  }

  /** The entry leaves; its id (and its entry, if keyed) is remembered for the dedupe window from `at`. */
  applyAck(id: string, at: number): void {
    const s = this.live.slotOf(id)
    if (s < 0) return
    if (!this.live.isObject(s)) {
      // A slot-only entry: a canonical id without key (its text released with its slot).
      if (this.live.isDead(s)) this.dead--
      else this.pending--
      this.liveBytes -= this.live.bytesOf(s)
      this.live.wordsOf(s, ackedId)
      this.live.deleteSlot(s)
      this.acked.addPlainWords(ackedId, at)
      this.liveBytes += AckedWindow.ID_BYTES
      return
    }
    const l = this.live.object(s)
    this.live.deleteSlot(s)
    if (l.status === "pending") this.pending--
    else this.dead--
    this.liveBytes -= l.bytes
    if (l.key !== undefined) {
      if (this.addresses.locate(l.pos, place) && this.acked.addKeyed(l, at, place[0]!, place[1]!)) {
        if (this.keys.get(l.key) === id) this.keys.delete(l.key)
        this.texts.release(l)
      } else this.acked.add(id, at, l, l.bytes)
      this.liveBytes += l.bytes
    } else {
      this.acked.add(id, at, undefined, AckedWindow.ID_BYTES)
      this.texts.release(l)
      this.liveBytes += AckedWindow.ID_BYTES
    }
  }

  /** A snapshot's acked id; a keyed one whose record is at `file`, `offset`. */
  applyAcked(id: string, at: number, entry: EntryData | undefined, bytes: number, file = -1, offset = 0): void {
    if (entry !== undefined && file >= 0 && entry.id === id) {
      entry.bytes = bytes
      if (this.acked.addKeyed(entry, at, file, offset)) {
        if (entry.seq >= this.nextSeq) this.nextSeq = entry.seq + 1
        this.liveBytes += bytes
        return
      }
    }
    if (entry !== undefined) {
      if (entry.key !== undefined) this.keys.set(entry.key, id)
      if (entry.seq >= this.nextSeq) this.nextSeq = entry.seq + 1
    }
    this.acked.add(id, at, entry, entry === undefined ? AckedWindow.ID_BYTES : bytes)
    this.liveBytes += entry === undefined ? AckedWindow.ID_BYTES : bytes
  }

  /** A snapshot's acked canonical id without entry, as its 128 bits. */
  applyAckedPlain(id: Uint32Array, at: number): void {
    this.acked.addPlainWords(id, at)
    this.liveBytes += AckedWindow.ID_BYTES
  }

  /** Forget ids acked `windowMs` or more before `now` (oldest first; amortised O(1) per ack). */
  evict(now: number, windowMs: number): void {
    this.liveBytes -= this.acked.evict(now, windowMs, this.forgetKey)
  }

  private readonly forgetKey = (id: string, entry: EntryData | undefined): void => {
    const key = entry?.key
    if (key !== undefined && this.keys.get(key) === id) this.keys.delete(key)
  }
}
