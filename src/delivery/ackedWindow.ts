/**
 * The ids acked within the dedupe window, in ack order, in three lists:
 * - `plain`: an id the log made (`randomUUID`) whose entry had no key, as its 128 bits in a
 *   typed-array ring (~24 bytes an id; idRing.ts);
 * - `keyed`: such an id whose entry had an idempotency key and no delivery history at its ack (no
 *   failed attempt, no dead letter): its bits, a 64-bit digest of the key and where the entry's
 *   record is (~49 bytes an id; keyedRing.ts). A repeated key is found by its digest and checked
 *   against the record, read back from disk;
 * - `kept`: anything else (an entry acked after failed attempts, an id of another shape), with its
 *   whole entry in a `Map`, as before.
 */
import { EntryData } from "./entryData.js"
import { type PlainColumns, PlainRing, type PlainView } from "./idRing.js"
import { digestKey, type KeyDigest } from "./keyDigest.js"
import { type KeyedColumns, KeyedFlag, KeyedRing, type KeyedView } from "./keyedRing.js"
import { parseUuid, scratch } from "./uuidWords.js"

/** An id acked within the window, as a snapshot writes it: its entry (as acked) when it had a key. */
export type AckedItem = readonly [id: string, at: number, entry: EntryData | undefined]

/**
 * A copy of the window for a snapshot (the live one goes on changing while it is written): the kept
 * ids, then the plain ring's, each in ack order; the keyed ring's apart.
 */
export interface AckedCopy {
  /** Every id, `keyed` included. */
  readonly size: number
  /** How many of them are plain (no entry). */
  readonly plain: number
  /** The ids kept with their entry (or not canonical), in ack order. */
  readonly kept: ReadonlyArray<AckedItem>
  /** The plain ring's ids (as their 128 bits) and ack times, in ack order. */
  readonly plainIds: PlainColumns
  /** The keyed ring's ids: their entries are read back from their records. */
  readonly keyed: KeyedColumns
}

/** The window's parts as a checkpoint holds them. */
export interface AckedParts {
  readonly kept: ReadonlyArray<readonly [id: string, at: number, entry: EntryData | undefined, bytes: number]>
  readonly plain: PlainColumns
  readonly keyed: KeyedColumns
}

/** The window's parts as a checkpoint's capture writes them at once: the rings as views of their arrays. */
export interface AckedView {
  readonly kept: AckedParts["kept"]
  readonly plain: PlainView
  readonly keyed: KeyedView
}

/** Reads the record at `file` (a file code, segment.ts) and `offset` as an entry; throws when it cannot. */
export type ReadRecord = (file: number, offset: number) => EntryData

/** The record at a keyed id's place holds another id: the place is wrong (a bug, or a changed file). */
export class WrongRecord extends Error {}

interface Kept {
  readonly at: number
  readonly entry: EntryData | undefined
  readonly bytes: number
}

/** Nothing happened to the entry but its append (and maybe an attempt start): its record says all. */
export const isPristine = (e: EntryData): boolean =>
  e.attempts === 0 && e.lastError === undefined && e.nextAttemptAt === undefined && e.status === "pending"

const idWords = new Uint32Array(4)
const digestWords = new Uint32Array(2)

export class AckedWindow {
  private readonly plain = new PlainRing()
  private readonly keyed = new KeyedRing()
  /** Ids kept with their entry (keyed, with a history) or not canonical, in ack order. */
  private readonly kept = new Map<string, Kept>()

  constructor(readonly digest: KeyDigest = digestKey) {}

  /** Bytes each plain id counts for (the compaction heuristic's live weight, as before). */
  static readonly ID_BYTES = 80

  get size(): number {
    return this.plain.count + this.keyed.count + this.kept.size
  }

  has(id: string): boolean {
    if (this.kept.has(id)) return true
    if (!parseUuid(id, scratch)) return false
    const [a, b, c, d] = scratch
    return this.plain.find(a!, b!, c!, d!) >= 0 || this.keyed.find(a!, b!, c!, d!) >= 0
  }

  /** The entry kept for an acked id (only `kept` ones: see `findKey` for the keyed ring). */
  entry(id: string): EntryData | undefined {
    return this.kept.get(id)?.entry
  }

  /** Room for this many plain and keyed ids (a snapshot's counts, read before its ids). */
  reserve(plain: number, keyed: number): void {
    this.plain.reserve(plain)
    this.keyed.reserve(keyed)
  }

  /** Remember `id` acked at `at`: a canonical id without entry in the plain ring, anything else kept with its entry. */
  add(id: string, at: number, entry: EntryData | undefined, bytes: number): void {
    if (entry === undefined && parseUuid(id, scratch)) {
      this.plain.add(scratch[0]!, scratch[1]!, scratch[2]!, scratch[3]!, at)
      return
    }
    this.kept.delete(id)
    this.kept.set(id, { at, entry, bytes })
  }

  /** A plain id from its 128 bits (replay reads them from the record's bytes). */
  addPlainWords(id: Uint32Array, at: number): void {
    this.plain.add(id[0]!, id[1]!, id[2]!, id[3]!, at)
  }

  /**
   * Remember keyed `entry`, acked at `at`, by its key's digest and the place of its record; false
   * (nothing done) when it does not fit the ring (a history, an id of another shape): `add` it.
   */
  addKeyed(entry: EntryData, at: number, file: number, offset: number): boolean {
    if (entry.key === undefined || !isPristine(entry) || !parseUuid(entry.id, idWords)) return false
    this.digest(entry.key, digestWords)
    this.keyed.add(idWords, at, digestWords, file, offset, entry.bytes, entry.started ? KeyedFlag.started : 0)
    return true
  }

  /** `addKeyed` of a pristine entry given as its id's 128 bits and its key's digest (replay, from the record's bytes). */
  addKeyedWords(
    id: Uint32Array,
    at: number,
    digest: Uint32Array,
    file: number,
    offset: number,
    bytes: number,
    started: boolean
  ): void {
    this.keyed.add(id, at, digest, file, offset, bytes, started ? KeyedFlag.started : 0)
  }

  /**
   * The newest keyed entry acked within the window whose key is `key`, read back through `read`
   * (its delivery state as acked: pending, no attempts, `maybeSent` if an attempt was started).
   * Throws what `read` throws, or `WrongRecord`.
   */
  findKey(key: string, read: ReadRecord): EntryData | undefined {
    if (this.keyed.count === 0) return undefined
    this.digest(key, digestWords)
    for (const slot of this.keyed.withDigest(digestWords[0]!, digestWords[1]!)) {
      const r = read(this.keyed.fileOf(slot), this.keyed.offsetOf(slot))
      this.keyed.idOf(slot, idWords)
      if (!parseUuid(r.id, scratch) || scratch.some((w, i) => w !== idWords[i])) {
        throw new WrongRecord(`the record at offset ${this.keyed.offsetOf(slot)} holds entry ${r.id}`)
      }
      if (r.key !== key) continue
      return acked(r, this.keyed.flagsOf(slot), this.keyed.bytesOf(slot))
    }
    return undefined
  }

  /** The keyed id `id` (128 bits) now has its record at `file`, `offset`, if its record was in a file numbered below `below`. */
  relocate(id: Uint32Array, below: number, file: number, offset: number): void {
    const slot = this.keyed.find(id[0]!, id[1]!, id[2]!, id[3]!)
    if (slot >= 0 && (this.keyed.fileOf(slot) & 0x7fff_ffff) < below) this.keyed.relocate(slot, file, offset)
  }

  /** Does any keyed id still have its record in a file numbered below `below`? */
  anyBelow(below: number): boolean {
    return this.keyed.anyFileBelow(below)
  }

  /**
   * Forget ids acked `windowMs` or more before `now`, oldest first (each list stops at its first id
   * still inside the window). `gone` sees each kept entry that leaves; returns the bytes freed.
   */
  evict(now: number, windowMs: number, gone: (id: string, entry: EntryData | undefined) => void): number {
    let freed = this.plain.evictBefore(now, windowMs) * AckedWindow.ID_BYTES + this.keyed.evict(now, windowMs)
    // Called once a millisecond on the append path: no iterator when there is nothing kept.
    if (this.kept.size === 0) return freed
    for (const [id, k] of this.kept) {
      if (now - k.at < windowMs) break
      this.kept.delete(id)
      freed += k.bytes
      gone(id, k.entry)
    }
    return freed
  }

  /** A copy for a snapshot: the kept ids, then the plain ring's, each in ack order; the keyed ring's apart. */
  copy(): AckedCopy {
    const plain = this.plain.copy()
    return {
      size: this.size,
      plain: plain.count,
      kept: Array.from(this.kept, ([id, k]): AckedItem => [id, k.at, k.entry]),
      plainIds: plain,
      keyed: this.keyed.copy()
    }
  }

  /** The parts as a checkpoint writes them (copies). */
  parts(): AckedParts {
    return {
      kept: Array.from(this.kept, ([id, k]) => [id, k.at, k.entry, k.bytes] as const),
      plain: { ...this.plain.copy(), table: this.plain.idTable() },
      keyed: { ...this.keyed.copy(), tables: this.keyed.tables() }
    }
  }

  /** The parts without copying the rings' arrays: valid until the window next changes (a checkpoint's capture). */
  view(): AckedView {
    return {
      kept: Array.from(this.kept, ([id, k]) => [id, k.at, k.entry, k.bytes] as const),
      plain: this.plain.view(),
      keyed: this.keyed.view()
    }
  }

  /** Fill an empty window from a checkpoint's parts. */
  restore(p: AckedParts): void {
    for (const [id, at, entry, bytes] of p.kept) this.kept.set(id, { at, entry, bytes })
    this.plain.restore(p.plain)
    this.keyed.restore(p.keyed)
  }
}

/** A keyed entry as acked, from its record's fields. */
export const acked = (r: EntryData, flags: number, bytes: number): EntryData =>
  new EntryData(
    r.id,
    r.seq,
    r.enqueuedAt,
    r.key,
    r.text,
    0,
    undefined,
    undefined,
    "pending",
    true,
    bytes,
    (flags & KeyedFlag.started) !== 0
  )
