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
 *
 * A chunk let go with nothing live, whose texts no object entry ever held (slot-only entries read
 * theirs through the arena, by chunk number, only while they are live) and while no frozen capture of
 * the entries is out (`pin`), is read by nothing any more: its buffer serves the next chunk (at most
 * `KEEP_FREE_CHUNKS` kept). A new chunk's buffer is otherwise fresh memory that the kernel maps page
 * by page as the encoder first writes it (a minor page fault per 4 KiB, ~12 µs of CPU each on the bench
 * machine's VM), and a dropped one is freed only when the old generation's collector finds its chunk
 * unreachable.
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
/** Buffers of chunks let go kept for the next chunks (4 MiB): a burst of appends acked together fits. */
export const KEEP_FREE_CHUNKS = 16
/** What a recycled chunk's `buf` becomes: a read through it fails instead of reading another chunk's texts. */
const RECYCLED = Buffer.alloc(0)

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
  constructor(
    /** Its number in its arena (`TextArena.chunk`). */
    readonly no: number = 0,
    /** Its bytes (a recycled chunk's buffer, or a fresh one). Empty once the arena recycled it. */
    public buf: Buffer = Buffer.allocUnsafeSlow(CHUNK_BYTES)
  ) {}
  used = 0
  /** Bytes of the texts here whose entries have not been released. */
  live = 0
  /** Every entry whose text was put here (until the chunk is let go). */
  owners: Array<TextOwner> = []

  /** The text at `at` (`length` bytes; `ascii`: every byte below 0x80). */
  text(at: number, length: number, ascii: boolean): string {
    if (this.buf === RECYCLED) throw recycledRead(this.no)
    const raw = this.buf as unknown as RawBuffer
    return ascii ? raw.latin1Slice(at, at + length) : raw.utf8Slice(at, at + length)
  }
}

/** A text read through a chunk whose buffer was recycled: a bug (the arena's rule above was broken), never data. */
export const recycledRead = (no: number): Error =>
  new Error(`text arena: chunk ${no} was read after its buffer was recycled`)

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
  /** Buffers of chunks let go that nothing reads any more (`next`), for the next chunks. */
  private readonly free: Array<Buffer> = []
  /** Frozen captures out (`pin`): while any is, no chunk is recycled (a capture reads chunks let go). */
  private pins = 0

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
      if (c.live === 0) {
        this.byNo.delete(c.no)
        // No object entry ever held a text here and no capture is out: nothing reads it any more.
        if (c.owners.length === 0 && this.pins === 0 && this.free.length < KEEP_FREE_CHUNKS) {
          this.free.push(c.buf)
          c.buf = RECYCLED
          this.recycled++
        }
      } else if (c.live * 4 >= c.used) kept.push(c)
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
    this.current = new TextChunk(this.nextNo++, this.free.pop())
    this.byNo.set(this.current.no, this.current)
    return this.current
  }

  /**
   * A frozen capture of the entries (`LiveEntries.freeze`) is out: it reads the texts of chunks the
   * arena may let go meanwhile, so none is recycled until `unpin`.
   */
  pin(): void {
    this.pins++
  }

  /** The capture `pin` was called for is no longer read. */
  unpin(): void {
    if (this.pins > 0) this.pins--
  }

  /** Chunks started after the first (tests). */
  started = 0
  /** Chunks whose buffer went back to the free list (tests and benchmarks). */
  recycled = 0

  /** Chunks held through the arena (tests and benchmarks). */
  get chunks(): number {
    return this.older.length + 1
  }
}
