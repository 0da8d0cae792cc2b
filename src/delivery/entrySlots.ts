/**
 * What a slot of the live entries (liveEntries.ts) holds besides its table: the flags of a slot-only
 * entry, an `EntryData` made from a slot's fields, and the live entries as they were at a moment
 * (`LiveEntries.freeze`, which a compaction reads while the log goes on).
 */
import { EntryData } from "./entryData.js"
import { textOf } from "./messageBytes.js"
import type { TextChunk } from "./textArena.js"
import { writeUuidWords } from "./uuidWords.js"

/** A slot-only entry's id text is made here. */
const idText = Buffer.alloc(36)

/** `flags`: the entry is dead; its append record is durable; an attempt was started; its text is ASCII; it is `objects[slot]`. */
export const DEAD = 1
export const COMMITTED = 2
export const STARTED = 4
export const ASCII = 8
export const OBJECT = 16

/** The canonical text of the id whose bits are `words[4k..4k + 4)`. */
export const uuidText = (words: Uint32Array, k: number): string => {
  writeUuidWords(idText, 0, words[4 * k]!, words[4 * k + 1]!, words[4 * k + 2]!, words[4 * k + 3]!)
  return textOf(idText, 0, 36, true)
}

/** A slot-only entry as an `EntryData` (`f`: its flags) reading its text from `chunk` (not an owner of it). */
export const plainEntry = (
  id: string,
  f: number,
  seq: number,
  enqueuedAt: number,
  pos: number,
  bytes: number,
  chunk: TextChunk,
  textAt: number,
  textBytes: number
): EntryData => {
  const dead = (f & DEAD) !== 0 ? "dead" : "pending"
  const e = new EntryData(
    id,
    seq,
    enqueuedAt,
    undefined,
    undefined,
    0,
    undefined,
    undefined,
    dead,
    (f & COMMITTED) !== 0,
    bytes
  )
  if ((f & STARTED) !== 0) e.started = true
  e.pos = pos
  e.holdText(chunk, textAt, textBytes, (f & ASCII) !== 0)
  return e
}

/** Entries to read one at a time: an array of them, or the live entries as they were at a moment (`LiveEntries.freeze`). */
export interface EntryList extends Iterable<EntryData> {
  readonly length: number
  /** Entry `k` (a fresh copy for a slot-only one: read it, keep it no longer than needed). */
  at(k: number): EntryData | undefined
}

/** The live entries as they were when `LiveEntries.freeze` ran: the slot-only ones' fields copied in typed arrays. */
export class FrozenEntries implements EntryList {
  constructor(
    readonly length: number,
    /** Per entry: its flags; its id's bits (4); seq, time, place and size (4); its text's offset and bytes (2) in `chunks[k]`. */
    private readonly flags: Uint8Array,
    private readonly words: Uint32Array,
    private readonly numbers: Float64Array,
    private readonly texts: Int32Array,
    private readonly chunks: Array<TextChunk | undefined>,
    /** Copies of the object entries (`undefined` at a slot-only entry's index). */
    private readonly objects: Array<EntryData | undefined>
  ) {}

  at(k: number): EntryData | undefined {
    if (!(k >= 0 && k < this.length)) return undefined
    const o = this.objects[k]
    if (o !== undefined) return o
    const n = this.numbers
    const t = this.texts
    return plainEntry(
      uuidText(this.words, k),
      this.flags[k]!,
      n[4 * k]!,
      n[4 * k + 1]!,
      n[4 * k + 2]!,
      n[4 * k + 3]!,
      this.chunks[k]!,
      t[2 * k]!,
      t[2 * k + 1]!
    )
  }

  *[Symbol.iterator](): IterableIterator<EntryData> {
    for (let k = 0; k < this.length; k++) yield this.at(k)!
  }
}
