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
 * Shared with the command queue's engine (`InternalOptions.entries`), the table is the engine's
 * `Map`: an entry is deleted as soon as neither side holds its key (`keep`, and the engine's
 * `forgetKey`).
 */
import type { InternalOptions } from "./entry.js"
import { Entry } from "./entry.js"
import { IDLE } from "./entry.js"

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

/** Linear probing at load ≤ 3/4; no deletion of single keys (only `rebuild` and `clear`). */
class StringSlots<K> {
  hashes = new Int32Array(16)
  slots: Array<Entry<K> | undefined> = new Array<Entry<K> | undefined>(16).fill(undefined)
  /** Slots in use (held and IDLE entries). */
  count = 0
  // the hash of the key looked up last: a wake looks a new key up, then inserts it
  private lastKey: string | undefined = undefined
  private lastHash = 0

  hash(key: string): number {
    if (key === this.lastKey) return this.lastHash
    const h = hashOf(key)
    this.lastKey = key
    this.lastHash = h
    return h
  }

  get(key: string): Entry<K> | undefined {
    const h = this.hash(key)
    const hashes = this.hashes
    const mask = hashes.length - 1
    for (let i = h & mask;; i = (i + 1) & mask) {
      const x = hashes[i]!
      if (x === 0) return undefined
      if (x === h) {
        const e = this.slots[i]!
        if (e.key === key) return e
      }
    }
  }

  /** Inserts `e` (its key is not in the table; there is room: see `full`). */
  insert(e: Entry<K>): void {
    const h = this.hash(e.key as string)
    const hashes = this.hashes
    const mask = hashes.length - 1
    let i = h & mask
    while (hashes[i] !== 0) i = (i + 1) & mask
    hashes[i] = h
    this.slots[i] = e
    this.count++
  }

  /** One more entry would pass the load of 3/4 (a probe reads on through the hashes only: one cache line holds 16). */
  get full(): boolean {
    return (this.count + 1) * 4 > this.hashes.length * 3
  }

  /**
   * Keeps only the entries `keep` keeps (all of them without it: a growth, which then reads no
   * entry), in a table sized for `live` of them (load ≤ 1/2 after).
   */
  rebuild(live: number, keep: ((e: Entry<K>) => boolean) | undefined): void {
    const oldHashes = this.hashes
    const oldSlots = this.slots
    let size = 16
    while (size < live * 2) size *= 2
    this.hashes = new Int32Array(size)
    this.slots = new Array<Entry<K> | undefined>(size).fill(undefined)
    this.count = 0
    const mask = size - 1
    for (let j = 0; j < oldHashes.length; j++) {
      const h = oldHashes[j]!
      if (h === 0) continue
      const e = oldSlots[j]!
      if (keep !== undefined && !keep(e)) continue
      let i = h & mask
      while (this.hashes[i] !== 0) i = (i + 1) & mask
      this.hashes[i] = h
      this.slots[i] = e
      this.count++
    }
  }

  clear(): void {
    if (this.count === 0) return
    if (this.hashes.length > KEEP_SIZE) {
      // after a burst of many keys: give the memory back
      this.hashes = new Int32Array(16)
      this.slots = new Array<Entry<K> | undefined>(16).fill(undefined)
    } else {
      this.hashes.fill(0)
      this.slots.fill(undefined)
    }
    this.count = 0
  }

  *values(): IterableIterator<Entry<K>> {
    const slots = this.slots
    for (let i = 0; i < slots.length; i++) {
      const e = slots[i]
      if (e !== undefined) yield e
    }
  }
}

const isHeld = <K>(e: Entry<K>): boolean => e.state !== IDLE

/** The lanes' keys: `get`, `acquire`, `release`, and every entry for the rare walks (`values`). */
export class KeyTable<K> {
  /** Entries the lanes hold (not IDLE): `stats.keys`. */
  held = 0
  /** IDLE entries left in the own tables. */
  private dead = 0
  private readonly shared: InternalOptions<K>["entries"]
  private readonly strings = new StringSlots<K>()
  /** Keys that are not strings (and the engine's map, when shared). */
  private readonly others: Map<K, Entry<K>>

  constructor(
    shared: InternalOptions<K>["entries"],
    /** `SWEEP_SLACK`, smaller in tests. */
    private readonly slack = SWEEP_SLACK
  ) {
    this.shared = shared
    this.others = shared?.map ?? new Map<K, Entry<K>>()
  }

  /** The entry of `key`, held or IDLE. */
  get(key: K): Entry<K> | undefined {
    return typeof key === "string" && this.shared === undefined
      ? this.strings.get(key)
      : this.others.get(key)
  }

  /** The entry of `key` if the lanes hold it. */
  lookup(key: K): Entry<K> | undefined {
    const e = this.get(key)
    return e === undefined || e.state === IDLE ? undefined : e
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
      const strings = this.strings
      if (strings.full || this.tooMany(1)) this.sweep()
      strings.insert(fresh)
    } else {
      if (this.tooMany(1)) this.sweep()
      this.others.set(key, fresh)
    }
    return fresh
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
    if (this.tooMany(DEAD_PER_HELD)) this.sweep()
  }

  /** IDLE entries outnumber what may stay: `perHeld` per held one, plus `SWEEP_SLACK`. */
  private tooMany(perHeld: number): boolean {
    return this.dead > this.held * perHeld + this.slack
  }

  /** Drops the IDLE entries of the own tables (the string table is rebuilt for the held ones). */
  private sweep(): void {
    this.strings.rebuild(this.held + 1, this.dead === 0 ? undefined : isHeld)
    for (const [key, e] of this.others) if (e.state === IDLE) this.others.delete(key)
    this.dead = 0
  }

  /** Entries stored, held and IDLE (what the table costs in memory). */
  get size(): number {
    return this.shared === undefined ? this.strings.count + this.others.size : this.others.size
  }

  /** Every entry (held or IDLE). */
  *values(): IterableIterator<Entry<K>> {
    if (this.shared === undefined) yield* this.strings.values()
    yield* this.others.values()
  }
}
