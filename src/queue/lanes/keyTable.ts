/**
 * The lanes' table of keys to entries, and when an entry leaves it. Internal to `src/queue`.
 *
 * An entry the lanes are done with is not deleted at once: it stays, IDLE, and is taken up again if
 * its key is woken again (no new object, no table write). The table is emptied in one step the
 * moment the lanes hold no key at all, and swept of IDLE entries when they outnumber the held ones
 * (see `tooMany`): memory stays bounded by the keys in use.
 *
 * String keys (the usual ones) live in an open-addressing table that keeps each key's hash beside
 * its slot: a probe for a key that is not there reads no other key, where a `Map` reads every key
 * of the bucket's chain (a cache miss each once there are a million keys: issue 12's million-key
 * row); other keys live in a `Map`.
 *
 * A key queued behind many others may be held without an entry at all (`waiting.ts`, "keys alone"):
 * its record holds the key itself, and its place in the queue holds the record's number, until it is
 * taken off the queue or looked up, when its entry is made; an entry released while many keys are
 * held leaves a tombstone in its record instead of staying IDLE (a burst's entries then die young:
 * no copy into the old generation, no fresh pages for them).
 *
 * Shared with the command queue's engine (`InternalOptions.entries`), the table is the engine's
 * `Map`: an entry is deleted as soon as neither side holds its key (`keep`, and the engine's
 * `forgetKey`).
 */
import type { InternalOptions } from "./entry.js"
import { Entry } from "./entry.js"
import { IDLE, QUEUED } from "./entry.js"

/** IDLE entries that may stay beyond the held ones before a new key sweeps them out. */
export const SWEEP_SLACK = 4_096
/**
 * IDLE entries per held one that may stay while no new key arrives (a release sweeps when there
 * are more): high, so that the end of a burst of a million keys is not swept again and again.
 */
export const DEAD_PER_HELD = 64

/** An entry of `createLanes`' own table (with the `wake` field the engine's entries do not need). */
class OwnEntry<K> extends Entry<K> {
  override wake: Entry<K>["wake"] = undefined
}

/**
 * Held keys beyond which a new entry is made as an object literal instead: V8 can allocate a
 * literal's objects straight in the old generation once it sees them live long (allocation-site
 * pretenuring), which a burst of a million held keys gains much from (no scavenge copies them
 * twice), while an ordinary entry, short-lived, must stay young (a `new` is never pretenured: a
 * literal site tenured by one burst would put every later short-lived entry in the old space).
 */
export const BURST_HELD = 8_192

/** Waiting keys beyond which lanes of their own queue a new string key alone, without an entry (`waiting.ts`). */
export const ALONE_FROM = 8_192

/** A new entry (IDLE). */
const newEntry = <K>(key: K, held: number): Entry<K> => held <= BURST_HELD ? new OwnEntry(key) : burstEntry(key)

/** An entry of a burst (same fields as `OwnEntry`, in the same order, from a literal). */
const burstEntry = <K>(key: K): Entry<K> =>
  ({
    state: IDLE,
    owed: false,
    reason: undefined,
    seq: 0,
    prev: undefined,
    next: undefined,
    work: undefined,
    key,
    wake: undefined
  }) as Entry<K>

/** FNV-1a over the UTF-16 code units, never 0 (0 marks a free slot). */
export const hashOf = (s: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193)
  return h | 1
}

/** A table this size or smaller is kept (zeroed) when it empties. */
const KEEP_SIZE = 1 << 16

/** The slot of a key released during a burst: no entry; the key is not there (a probe goes on past it). */
const TOMB = -1

/** How a sweep renumbered the records of keys alone: `from[i]` (ascending) is now `to[i]`; any other record is gone. */
export interface Renumbered {
  readonly from: ReadonlyArray<number>
  readonly to: ReadonlyArray<number>
}

/** The new number of record `r` (`Renumbered`), or -1. */
export const renumbered = (moved: Renumbered, r: number): number => {
  const from = moved.from
  let lo = 0
  let hi = from.length - 1
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1
    const x = from[mid]!
    if (x === r) return moved.to[mid]!
    if (x < r) lo = mid + 1
    else hi = mid - 1
  }
  return -1
}

/** A record's value: the key's entry; the key itself, held without an entry (`waiting.ts`); or `TOMB`. */
type Slot<K> = Entry<K> | string | number | undefined

/** Records a chunk once the records outgrow the first chunk (`StringSlots`). */
const CHUNK = 1 << 14
const CHUNK_MASK = CHUNK - 1

/**
 * String keys by hash, chained: each key has a record (its hash, the next record of its bucket, its
 * slot value), in chunks that are never copied; a bucket array (one `Int32Array`, load ≤ 1) holds
 * the first record of each bucket. Growth makes a new bucket array and relinks the records where
 * they are: a million keys touch ~16 bytes of records a key and 4–8 of buckets, where a table of
 * slots grown by doubling touched its ~24 bytes a key twice (every copy is fresh memory, ~20 µs a
 * page on the bench machine). A probe for a key that is not there reads its bucket and the hashes
 * of its chain (~one record at load ≤ 1), no other key. No deletion of single keys (only
 * tombstones, `rebuild` and `clear`).
 */
class StringSlots<K> {
  /** Record + 1 of each bucket's first record (0: empty). */
  private heads = new Int32Array(16)
  /** Per record: its hash, then its next record + 1 in its bucket (0: none). */
  private links: Array<Int32Array> = [new Int32Array(32)]
  private vals: Array<Array<Slot<K>>> = [new Array<Slot<K>>(16).fill(undefined)]
  /** Records in use (held and IDLE entries, keys alone, tombstones). */
  count = 0
  // the hash of the key looked up last: a wake looks a new key up, then inserts it
  private lastKey: string | undefined = undefined
  private lastHash = 0

  /** Told how a `rebuild` renumbered the records of keys alone (`Renumbered`). */
  constructor(private readonly renumbered: ((moved: Renumbered) => void) | undefined) {}

  hash(key: string): number {
    if (key === this.lastKey) return this.lastHash
    const h = hashOf(key)
    this.lastKey = key
    this.lastHash = h
    return h
  }

  /** The value of record `r`. */
  at(r: number): Slot<K> {
    return this.vals[r >>> 14]![r & CHUNK_MASK]
  }

  set(r: number, v: Entry<K> | string | number): void {
    this.vals[r >>> 14]![r & CHUNK_MASK] = v
  }

  /** The record of `key`, or -1. */
  indexOf(key: string): number {
    const h = this.hash(key)
    const heads = this.heads
    for (let r = heads[h & (heads.length - 1)]! - 1; r >= 0;) {
      const links = this.links[r >>> 14]!
      const o = 2 * (r & CHUNK_MASK)
      if (links[o] === h) {
        const v = this.vals[r >>> 14]![r & CHUNK_MASK]!
        if (typeof v === "string" ? v === key : typeof v !== "number" && v.key === key) return r
      }
      r = links[o + 1]! - 1
    }
    return -1
  }

  /** What `key`'s record holds: its entry, the key (held without an entry), or `undefined`. */
  get(key: string): Slot<K> {
    const r = this.indexOf(key)
    return r < 0 ? undefined : this.at(r)
  }

  /** Adds `v` for `key` (not in the table); returns its record. */
  insert(key: string, v: Entry<K> | string): number {
    return this.append(this.hash(key), v)
  }

  private append(h: number, v: Entry<K> | string): number {
    const r = this.count++
    const c = r >>> 14
    if (c === this.links.length) {
      this.links.push(new Int32Array(2 * CHUNK))
      this.vals.push(new Array<Slot<K>>(CHUNK).fill(undefined))
    } else if (2 * (r & CHUNK_MASK) >= this.links[c]!.length) {
      // the first chunk grows by doubling up to a whole chunk (small tables stay small)
      const n = Math.min(CHUNK, 2 * this.vals[0]!.length)
      const links = new Int32Array(2 * n)
      links.set(this.links[0]!)
      this.links[0] = links
      const vals = new Array<Slot<K>>(n).fill(undefined)
      const old = this.vals[0]!
      for (let i = 0; i < old.length; i++) vals[i] = old[i]
      this.vals[0] = vals
    }
    const links = this.links[c]!
    const o = 2 * (r & CHUNK_MASK)
    links[o] = h
    this.vals[c]![r & CHUNK_MASK] = v
    if (this.count > this.heads.length) this.relink(2 * this.heads.length)
    else {
      const b = h & (this.heads.length - 1)
      links[o + 1] = this.heads[b]!
      this.heads[b] = r + 1
    }
    return r
  }

  /** A new bucket array of `buckets`, every record linked into it where it is. */
  private relink(buckets: number): void {
    const heads = new Int32Array(buckets)
    const mask = buckets - 1
    for (let r = 0; r < this.count; r++) {
      const links = this.links[r >>> 14]!
      const o = 2 * (r & CHUNK_MASK)
      const b = links[o]! & mask
      links[o + 1] = heads[b]!
      heads[b] = r + 1
    }
    this.heads = heads
  }

  /**
   * Keeps only the records `keep` keeps (tombstones go; keys alone stay), in a table sized for
   * `live` of them. Records are renumbered: an entry's record hint (`seq` < 0) follows, and so do
   * the places of keys alone (`renumbered`).
   */
  rebuild(live: number, keep: (e: Entry<K>) => boolean): void {
    const links = this.links
    const vals = this.vals
    const count = this.count
    this.reset(live)
    const from: Array<number> = []
    const to: Array<number> = []
    for (let r = 0; r < count; r++) {
      const v = vals[r >>> 14]![r & CHUNK_MASK]!
      if (typeof v === "number" || (typeof v !== "string" && !keep(v))) continue
      const n = this.append(links[r >>> 14]![2 * (r & CHUNK_MASK)]!, v)
      if (typeof v !== "string") {
        if (v.seq < 0) v.seq = -(n + 1)
      } else {
        from.push(r)
        to.push(n)
      }
    }
    if (from.length > 0) this.renumbered?.({ from, to })
  }

  /** Empty, with room for `n` records before the bucket array grows. */
  private reset(n: number): void {
    let size = 16
    while (size < n) size *= 2
    this.heads = new Int32Array(size)
    const first = Math.min(CHUNK, size)
    this.links = [new Int32Array(2 * first)]
    this.vals = [new Array<Slot<K>>(first).fill(undefined)]
    this.count = 0
  }

  clear(): void {
    if (this.count === 0) return
    if (this.heads.length > KEEP_SIZE) {
      // after a burst of many keys: give the memory back
      this.reset(16)
      return
    }
    this.heads.fill(0)
    for (const v of this.vals) v.fill(undefined)
    this.count = 0
  }

  /** Every entry (keys held without one are not listed). */
  *values(): IterableIterator<Entry<K>> {
    for (let r = 0; r < this.count; r++) {
      const e = this.at(r)
      if (typeof e === "object") yield e
    }
  }
}

const isHeld = <K>(e: Entry<K>): boolean => e.state !== IDLE

/** What `peek` gives for a key held without an entry: queued (a wake of it coalesces). Never changed. */
export const ALONE: Entry<never> = Object.freeze(Object.assign(new Entry<never>(undefined as never), { state: QUEUED }))

/** The lanes' keys: `get`, `acquire`, `release`, and every entry for the rare walks (`values`). */
export class KeyTable<K> {
  /** Entries the lanes hold (not IDLE), and keys held without an entry: `stats.keys`. */
  held = 0
  /** IDLE entries and tombstones left in the own tables. */
  private dead = 0
  private readonly shared: InternalOptions<K>["entries"]
  private readonly strings: StringSlots<K>
  /** Keys that are not strings (and the engine's map, when shared). */
  private readonly others: Map<K, Entry<K>>

  constructor(
    shared: InternalOptions<K>["entries"],
    /** `SWEEP_SLACK`, smaller in tests. */
    private readonly slack = SWEEP_SLACK,
    /** Told when records are renumbered (`waiting.ts` keeps the records of keys alone). */
    renumbered?: (moved: Renumbered) => void
  ) {
    this.shared = shared
    this.others = shared?.map ?? new Map<K, Entry<K>>()
    this.strings = new StringSlots<K>(renumbered)
  }

  /**
   * The entry of `key`, held or IDLE (one held without an entry gets it now: QUEUED, `seq` -1 -
   * its record, as its place in the queue names it).
   */
  get(key: K): Entry<K> | undefined {
    if (typeof key !== "string" || this.shared !== undefined) return this.others.get(key)
    const strings = this.strings
    const i = strings.indexOf(key)
    if (i < 0) return undefined
    const v = strings.at(i)!
    if (typeof v !== "string") return v as Entry<K>
    const e = queuedAlone(key, i)
    strings.set(i, e)
    return e
  }

  /** `get` without making an entry: `ALONE` for a key held without one (the wake's lookup). */
  peek(key: K): Entry<K> | undefined {
    if (typeof key !== "string" || this.shared !== undefined) return this.others.get(key)
    const v = this.strings.get(key)
    return typeof v === "string" ? ALONE as Entry<K> : v as Entry<K> | undefined
  }

  /** The entry of `key` if the lanes hold it. */
  lookup(key: K): Entry<K> | undefined {
    const e = this.get(key)
    return e === undefined || e.state === IDLE ? undefined : e
  }

  /** The key alone (or looked up since) at record `r`, if it still waits there; without making an entry. */
  aloneAt(r: number): K | undefined {
    const v = this.strings.at(r)
    if (typeof v === "string") return v as K
    return typeof v === "object" && v.state === QUEUED && v.seq === -(r + 1) ? v.key : undefined
  }

  /** The lanes take `key` up: `idle` (its IDLE entry, as `get` found it), or a new entry. */
  acquire(key: K, idle: Entry<K> | undefined): Entry<K> {
    this.held++
    const shared = this.shared
    if (idle !== undefined) {
      if (shared === undefined) this.dead--
      return idle
    }
    if (shared !== undefined) {
      const made = shared.make(key)
      this.others.set(key, made)
      return made
    }
    const fresh = newEntry(key, this.held)
    if (typeof key === "string") {
      if (this.tooMany(1)) this.sweep()
      this.strings.insert(key, fresh)
    } else {
      if (this.tooMany(1)) this.sweep()
      this.others.set(key, fresh)
    }
    return fresh
  }

  /** The lanes take up string `key`, not in the table, without an entry; returns its record (its place in the queue names it). */
  acquireAlone(key: string): number {
    this.held++
    if (this.tooMany(1)) this.sweep()
    return this.strings.insert(key, key)
  }

  /**
   * The entry of the key alone at record `r`, as it is taken off the queue (made now if it has none);
   * `undefined` if that place is stale (the key left the queue since: cancelled, and maybe queued
   * again at another place). No probe: the place names the record.
   */
  takeUp(r: number): Entry<K> | undefined {
    const strings = this.strings
    const v = strings.at(r)
    if (typeof v === "string") {
      const e = queuedAlone(v as K, r)
      strings.set(r, e)
      return e
    }
    return typeof v === "object" && v.state === QUEUED && v.seq === -(r + 1) ? v : undefined
  }

  /** The lanes are done with `e` (its activation fields are cleared). */
  release(e: Entry<K>): void {
    this.held--
    e.state = IDLE
    e.owed = false
    e.reason = undefined
    e.work = undefined
    const shared = this.shared
    if (shared !== undefined) {
      if (!shared.keep(e)) this.others.delete(e.key)
      return
    }
    e.wake = undefined
    if (this.held === 0) {
      // nothing held: every entry is IDLE
      this.strings.clear()
      this.others.clear()
      this.dead = 0
      return
    }
    this.dead++
    // During a burst the entry goes (a tombstone in its record), so that it dies young.
    const hint = e.seq < 0 ? -e.seq - 1 : -1
    if (hint >= 0) e.seq = 0
    if (this.held > BURST_HELD && typeof e.key === "string") {
      const strings = this.strings
      const i = hint >= 0 && hint < strings.count && strings.at(hint) === e ? hint : strings.indexOf(e.key)
      if (i >= 0 && strings.at(i) === e) strings.set(i, TOMB)
    }
    if (this.tooMany(DEAD_PER_HELD)) this.sweep()
  }

  /** IDLE entries outnumber what may stay: `perHeld` per held one, plus `SWEEP_SLACK`. */
  private tooMany(perHeld: number): boolean {
    return this.dead > this.held * perHeld + this.slack
  }

  /** Drops the IDLE entries and tombstones of the own tables (the string table is rebuilt for the held keys). */
  private sweep(): void {
    this.strings.rebuild(this.held + 1, isHeld)
    for (const [key, e] of this.others) if (e.state === IDLE) this.others.delete(key)
    this.dead = 0
  }

  /** Slots stored: entries held and IDLE, keys held without one, tombstones (what the table costs in memory). */
  get size(): number {
    return this.shared === undefined ? this.strings.count + this.others.size : this.others.size
  }

  /** Every entry (held or IDLE; keys held without an entry are not listed). */
  *values(): IterableIterator<Entry<K>> {
    if (this.shared === undefined) yield* this.strings.values()
    yield* this.others.values()
  }
}

/**
 * The entry of a key held without one, made as it is taken off the queue or looked up: young (a class
 * instance), QUEUED, its `seq` -1 - its record (what its place in the queue names; kept as a hint for
 * its release once it runs).
 */
const queuedAlone = <K>(key: K, r: number): Entry<K> => {
  const e = new OwnEntry(key)
  e.state = QUEUED
  e.seq = -(r + 1)
  return e
}
