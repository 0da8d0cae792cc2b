/**
 * The JSON texts of appended entries, off the JavaScript heap. A pending entry used to keep its text
 * as a string (~200 bytes for a short message): every append left one more string for the young
 * generation's collector to copy twice and for the old generation's to mark, which was about a
 * quarter of an append's CPU with many entries pending. Here an appended entry's text bytes are copied
 * into a chunk of a few hundred KiB (one `Buffer`, outside the heap) and the entry keeps the chunk,
 * an offset and a length; `EntryData.text` makes the string when an entry is read.
 *
 * A chunk's bytes are never overwritten: an entry (or a copy of it made for compaction or a
 * checkpoint) that holds a chunk reads the right bytes for as long as it lives, and the collector
 * frees a chunk once nothing holds it. What the arena manages is only memory: a chunk is held by any
 * one entry still in it, so a few long-lived entries could hold many chunks. The arena counts the
 * bytes of each chunk's texts whose entries have not left the log (`release`); when it starts a new
 * chunk, an older one whose live bytes fell under a quarter of its used bytes gets its remaining
 * entries' texts made into strings (the old representation) and is let go. So the chunks held
 * through the arena are at most four times their live texts, plus the one being filled.
 */

/** What the arena needs of an entry (`EntryData` in entryData.ts, which imports this file). */
export interface TextOwner {
  /** Bytes of its text in a chunk. */
  readonly textBytes: number
  /** Its text is `chunk.buf[at, at + bytes)` from now on. */
  holdText(chunk: TextChunk, at: number, bytes: number, ascii: boolean): void
  /** Mark its text released; its chunk if it held one not released yet. */
  releaseText(): TextChunk | undefined
  /** If its (unreleased) text is in `chunk`, make it a string and let go of the chunk. */
  ownText(chunk: TextChunk): void
}

/** Bytes of one chunk. */
export const CHUNK_BYTES = 256 * 1024
/** Texts longer than this stay strings (a chunk holds many texts; a large one would waste its tail). */
export const ARENA_TEXT_MAX = 16 * 1024

/** Raw Buffer methods Node has on every supported version (no argument checks per call). */
interface RawBuffer {
  latin1Slice(start: number, end: number): string
  utf8Slice(start: number, end: number): string
}

/**
 * Entries that hold their texts by chunk number rather than as `TextOwner`s (the live entries' slots,
 * liveEntries.ts): before sparse chunks are let go, their texts there become strings.
 */
export interface NumberedTexts {
  ownTexts(chunks: ReadonlyArray<TextChunk>): void
}

/** One chunk of texts. */
export class TextChunk {
  /** Its number in its arena (`TextArena.chunk`). */
  constructor(readonly no: number = 0) {}
  readonly buf: Buffer = Buffer.allocUnsafeSlow(CHUNK_BYTES)
  used = 0
  /** Bytes of the texts here whose entries have not been released. */
  live = 0
  /** Every entry whose text was put here (until the chunk is let go). */
  owners: Array<TextOwner> = []

  /** The text at `at` (`length` bytes; `ascii`: every byte below 0x80). */
  text(at: number, length: number, ascii: boolean): string {
    const raw = this.buf as unknown as RawBuffer
    return ascii ? raw.latin1Slice(at, at + length) : raw.utf8Slice(at, at + length)
  }
}

/** The chunks of one log's state. */
export class TextArena {
  private nextNo = 0
  private current = new TextChunk(this.nextNo++)
  /** Chunks filled before `current` that still have live texts. */
  private older: Array<TextChunk> = []
  /** `current` and `older` by number. */
  private readonly byNo = new Map<number, TextChunk>([[this.current.no, this.current]])
  /** The entries that hold texts by chunk number, if any. */
  numbered: NumberedTexts | undefined

  /** Chunk `no` (held through the arena: some text there is live). */
  chunk(no: number): TextChunk {
    return this.byNo.get(no)!
  }

  /** Number of the chunk being filled (where `place` put the last text). */
  get currentNo(): number {
    return this.current.no
  }

  /**
   * `adopt` for an entry that holds its text by number: returns the text's offset in chunk `currentNo`
   * (counted live there, no owner kept), or -1 (nothing done) when it is too long for the arena.
   */
  place(src: Buffer, start: number, n: number): number {
    if (n > ARENA_TEXT_MAX) return -1
    let c = this.current
    if (src !== c.buf || start !== c.used) {
      if (c.used + n > CHUNK_BYTES) c = this.next()
      src.copy(c.buf, c.used, start, start + n)
    }
    const at = c.used
    c.used += n
    c.live += n
    return at
  }

  /** A numbered text of `bytes` bytes in chunk `no` left the log (`release` of a numbered one). */
  releasePlaced(no: number, bytes: number): void {
    const c = this.byNo.get(no)
    if (c !== undefined) c.live -= bytes
  }

  /** `owner` holds the numbered text at `at` of chunk `no` from now on (counted live there already). */
  own(owner: TextOwner, no: number, at: number, bytes: number, ascii: boolean): void {
    const c = this.byNo.get(no)!
    owner.holdText(c, at, bytes, ascii)
    c.owners.push(owner)
  }

  /**
   * Copy `src[start, end)` (a message's JSON text) into the arena for `owner`, which must not hold a
   * text yet; false (nothing done) when the text is too long for the arena.
   */
  put(src: Buffer, start: number, end: number, ascii: boolean, owner: TextOwner): boolean {
    const n = end - start
    if (n > ARENA_TEXT_MAX) return false
    let c = this.current
    if (c.used + n > CHUNK_BYTES) c = this.next()
    src.copy(c.buf, c.used, start, end)
    owner.holdText(c, c.used, n, ascii)
    c.used += n
    c.live += n
    c.owners.push(owner)
    return true
  }

  /** The chunk being filled: an encoder may write a text at `buf[freeAt…]`, then `adopt` it. */
  get buf(): Buffer {
    return this.current.buf
  }

  /** Where the free space of `buf` starts. */
  get freeAt(): number {
    return this.current.used
  }

  /**
   * The text `owner` needs is `src[start, start + n)`: kept where it is when that is `buf` at
   * `freeAt` (an encoder wrote it there), else copied (`put`). False when too long for the arena.
   */
  adopt(src: Buffer, start: number, n: number, ascii: boolean, owner: TextOwner): boolean {
    const c = this.current
    if (src !== c.buf || start !== c.used || n > ARENA_TEXT_MAX) return this.put(src, start, start + n, ascii, owner)
    owner.holdText(c, start, n, ascii)
    c.used += n
    c.live += n
    c.owners.push(owner)
    return true
  }

  /** `owner` left the log (acked, not kept): its text no longer counts as live in its chunk. */
  release(owner: TextOwner): void {
    const c = owner.releaseText()
    if (c !== undefined) c.live -= owner.textBytes
  }

  /** Start a new chunk; let go of older ones with nothing live, and move the texts out of sparse ones. */
  private next(): TextChunk {
    const kept: Array<TextChunk> = []
    const sparse: Array<TextChunk> = []
    for (const c of [...this.older, this.current]) {
      if (c.live === 0) this.byNo.delete(c.no)
      else if (c.live * 4 >= c.used) kept.push(c)
      else sparse.push(c)
    }
    if (sparse.length > 0) {
      this.numbered?.ownTexts(sparse)
      for (const c of sparse) {
        for (const owner of c.owners) owner.ownText(c)
        this.byNo.delete(c.no)
      }
    }
    this.older = kept
    this.started++
    this.current = new TextChunk(this.nextNo++)
    this.byNo.set(this.current.no, this.current)
    return this.current
  }

  /** Chunks started after the first (tests). */
  started = 0

  /** Chunks held through the arena (tests and benchmarks). */
  get chunks(): number {
    return this.older.length + 1
  }
}
