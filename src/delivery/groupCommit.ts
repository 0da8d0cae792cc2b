/**
 * Group commit: one writer loop owns the active segment. Callers hand it an encoded record and a
 * completion; the loop writes everything pending with one durable write (the segment is open with
 * `O_DSYNC` when syncing: the write returns once its data is on stable storage, as write + fdatasync
 * in one system call; where the platform has no `O_DSYNC`, a write and an fdatasync), then completes
 * every caller it covered. The write is made on the event loop's thread or on the thread pool (the
 * `writes` option, `inlineFor`). A failed write or sync fails every caller it covered and every later one:
 * the writer never retries a sync (after a failed fsync the page cache cannot be trusted), the log
 * must be re-opened through recovery.
 */
import * as fs from "node:fs"
import { createSegment, O_DSYNC } from "./segment.js"
import type { WriteMode } from "./validate.js"

/** Called once: `undefined` when the record is durable (or written, with `sync: false`). */
export type Completion = (error: Error | undefined) => void

/** The segment the writer appends to. */
export interface ActiveSegment {
  readonly number: number
  /** Open with `segmentFlags(sync)` (`O_DSYNC` when syncing). */
  fd: number
  /** Bytes of records. */
  size: number
  /** The file's length: past `size` it holds zeros the writer filled ahead (`fsync: "always"`). */
  length: number
}

/** What the writer tells its owner. */
export interface WriterEvents {
  /** A new segment was created (synced with its directory) and is now the active one. */
  readonly onRoll: (number: number) => void
  /** Bytes were appended to segment `number` (durably, when syncing). */
  readonly onWritten: (number: number, bytes: number) => void
  /** A write, sync or roll failed: the writer accepts nothing more (see `frontier`). */
  readonly onFailed?: (error: Error) => void
}

/** How far the log is durable: segment `number` holds `size` good bytes (a failed batch may have left more). */
export interface Frontier {
  readonly number: number
  readonly size: number
}

/** A checkpoint for compaction: the state captured after the last record of segment `sealed`. */
export interface Checkpoint<S> {
  readonly captured: S
  readonly sealed: number
  readonly reserved: number
}

const write = (fd: number, buf: Buffer, position: number): Promise<void> =>
  new Promise((resolve, reject) => {
    let off = 0
    const step = (): void => {
      fs.write(fd, buf, off, buf.length - off, position + off, (err, n) => {
        if (err) return reject(err)
        off += n
        if (off < buf.length) step()
        else resolve()
      })
    }
    step()
  })

/** `buf[start, end)` at `position`, on the calling thread (a short write goes on where it stopped). */
const writeInline = (fd: number, buf: Buffer, start: number, end: number, position: number): void => {
  let off = start
  while (off < end) off += fs.writeSync(fd, buf, off, end - off, position + (off - start))
}

/**
 * `writes: "auto"`: an inline write (with its sync) that took longer than this moves the writer to the
 * thread pool: the disk stalls, and the event loop should not wait with it.
 */
export const SLOW_WRITE_MS = 50
/** `writes: "auto"`: how long the writer stays on the thread pool after a slow inline write. */
export const POOL_SPELL_MS = 30_000
/**
 * `writes: "auto"`: the fewest calls a batch must cover to be written inline. A big batch is what many
 * producers in one tick make (a throughput-bound burst): one hop to the thread pool and back costs more
 * than its write. A small one is latency-bound: on the thread pool the loop goes on with other work
 * meanwhile, and the next calls gather into the next batch while this one is on its way.
 */
export const INLINE_MIN_CALLS = 32
/**
 * `writes: "auto"`: a big batch goes inline only once this many big batches in a row were written on the
 * thread pool with no call arriving while they were on their way: nothing else would have run meanwhile,
 * so the event loop loses nothing by waiting. Where calls do arrive meanwhile (a delivery queue sending
 * while producers append), the overlap is worth the hop and the writes stay on the thread pool.
 */
export const IDLE_WRITES_TO_INLINE = 2
/** `writes: "auto"`: big batches written inline before the next one goes to the thread pool again, to look. */
export const INLINE_RUN = 32

const datasync = (fd: number): Promise<void> =>
  new Promise((resolve, reject) => fs.fdatasync(fd, (err) => (err ? reject(err) : resolve())))

/**
 * How far ahead of its records the writer fills the active segment with zeros (`fsync: "always"`):
 * records then overwrite zeros already on disk, so their fdatasync flushes data and commits no size
 * change (ext4 journals one when a write grows the file). The zeros go out with the batch that
 * passes the filled space, in its write and sync: once every 4 MiB of records.
 */
export const FILL_BYTES = 4 * 1024 * 1024
let fillZeros: Buffer | undefined
/** The writer fills only while the disk has this much free space (16 fills). */
export const FILL_MIN_FREE = 16 * FILL_BYTES

/** Initial size of a staging buffer; it doubles as needed (a batch's records are framed in place). */
const STAGE_BYTES = 64 * 1024
/** A staging buffer larger than this is not kept for reuse once its batch is written. */
const KEEP_STAGE_BYTES = 4 * 1024 * 1024

/**
 * The single writer of a log directory. Records are framed straight into a staging buffer
 * (`reserve`, then `push`); a batch is the staging buffer as it stands when the writer takes it, so
 * it reaches the file with one `write` (per segment) and no copy. Two buffers take turns: callers fill
 * one while the other is being written.
 */
export class GroupCommitWriter {
  /** The staging buffer being filled, and how much of it is used. */
  private stage: Buffer = Buffer.allocUnsafeSlow(STAGE_BYTES)
  private staged = 0
  /** Per queued call: where its record ends in `stage` (a marker ends where the record before it does), and its completion. */
  private ends: Array<number> = []
  private dones: Array<Completion | undefined> = []
  /** The other staging buffer, free while no batch is being written. */
  private spare: Buffer | undefined = Buffer.allocUnsafeSlow(STAGE_BYTES)
  private running = false
  /** Bytes of the batches taken so far (see `taken`). */
  private takenBytes = 0
  private failure: Error | undefined
  private closed = false
  private checkpoint:
    | { capture: () => unknown; resolve: (c: Checkpoint<unknown>) => void; reject: (e: Error) => void }
    | undefined

  /** `writes: "auto"`: the clock reading (ms) from which writes are inline again. */
  private inlineFrom = 0

  constructor(
    private readonly dir: string,
    private active: ActiveSegment,
    private readonly segmentBytes: number,
    private readonly sync: boolean,
    private readonly events: WriterEvents,
    private readonly writes: WriteMode = "auto",
    /** A monotonic clock, ms: times the inline writes (`writes: "auto"`). Tests pass their own. */
    private readonly clock: () => number = () => performance.now()
  ) {}

  /** `writes: "auto"`: big batches in a row written on the thread pool with no call arriving meanwhile. */
  private idleWrites = 0
  /** `writes: "auto"`: big batches still to be written inline before the next look from the thread pool. */
  private inlineLeft = 0

  /** Is a batch of `calls` calls written on the event loop's thread (see `OpenOptions.writes`)? */
  inlineFor(calls: number): boolean {
    if (this.writes !== "auto") return this.writes === "inline"
    if (calls < INLINE_MIN_CALLS || this.inlineLeft === 0 || this.clock() < this.inlineFrom) return false
    this.inlineLeft--
    return true
  }

  /** `writes: "auto"`: a big batch's write on the thread pool returned; `arrived`: calls came meanwhile. */
  private pooled(arrived: boolean): void {
    this.idleWrites = arrived ? 0 : this.idleWrites + 1
    if (this.idleWrites >= IDLE_WRITES_TO_INLINE) {
      this.idleWrites = 0
      this.inlineLeft = INLINE_RUN
    }
  }

  /** The error that stopped the writer, if one did. */
  get failed(): Error | undefined {
    return this.failure
  }

  /** After a failure: the segment and size up to which every record was reported durable. */
  get frontier(): Frontier {
    return { number: this.active.number, size: this.active.size }
  }

  /** Number of the segment being appended to. */
  get activeNumber(): number {
    return this.active.number
  }

  /**
   * Make room for a record of `bytes` bytes at the end of the staging buffer and return its offset
   * in `buffer` (read `buffer` after this call: it may have grown). The caller frames the record there
   * at once, then calls `push`. Only while the writer is open and has not failed.
   */
  reserve(bytes: number): number {
    const at = this.staged
    const need = at + bytes
    if (need > this.stage.length) {
      let size = this.stage.length * 2
      while (size < need) size *= 2
      const bigger = Buffer.allocUnsafeSlow(size)
      this.stage.copy(bigger, 0, 0, at)
      this.stage = bigger
    }
    this.staged = need
    return at
  }

  /** Give back the room reserved at `at` (framing failed): nothing of it will be written. */
  cancel(at: number): void {
    this.staged = at
  }

  /**
   * Bytes of the batches taken for writing so far: the record `reserve` placed at `at` is written
   * `taken + at` bytes after the writer's first byte (batches are written in order, whole).
   */
  get taken(): number {
    return this.takenBytes
  }

  /** Bytes staged in the buffer being filled: the next record `reserve` places starts there. */
  get staging(): number {
    return this.staged
  }

  /** The staging buffer that `reserve` made room in. */
  get buffer(): Buffer {
    return this.stage
  }

  /** Queue the record just framed at the end of the staging buffer; `done` runs once it is durable. */
  push(done: Completion): void {
    this.ends.push(this.staged)
    this.dones.push(done)
    this.kick()
  }

  /**
   * Queue a marker that completes once everything queued before it is durable. Completes synchronously
   * with the failure if the writer already failed.
   */
  mark(done: Completion): void {
    if (this.failure !== undefined) return done(this.failure)
    if (this.closed) return done(new Error("the writer is closed"))
    this.push(done)
  }

  /**
   * Capture state for compaction at a record boundary: `capture` runs synchronously when the pending
   * records are taken, so it sees exactly the records that end the current segment. After they are
   * durable the writer seals the segment, reserves the next number for the snapshot and continues in
   * the one after it.
   */
  requestCheckpoint<S>(capture: () => S): Promise<Checkpoint<S>> {
    if (this.failure !== undefined) return Promise.reject(this.failure)
    if (this.checkpoint !== undefined) return Promise.reject(new Error("a checkpoint is already pending"))
    return new Promise<Checkpoint<S>>((resolve, reject) => {
      this.checkpoint = { capture, resolve: resolve as (c: Checkpoint<unknown>) => void, reject }
      this.kick()
    })
  }

  private kick(): void {
    if (this.running) return
    this.running = true
    // One macrotask of delay lets every producer of this tick join the first batch.
    setImmediate(() => void this.run())
  }

  private async run(): Promise<void> {
    while (this.dones.length > 0 || this.checkpoint !== undefined) {
      // Take the batch: callers go on framing into the other buffer meanwhile.
      const buf = this.stage
      const ends = this.ends
      const dones = this.dones
      this.stage = this.spare ?? Buffer.allocUnsafeSlow(STAGE_BYTES)
      this.spare = undefined
      this.takenBytes += this.staged
      this.staged = 0
      this.ends = []
      this.dones = []
      const cp = this.checkpoint
      this.checkpoint = undefined
      const captured = cp?.capture()
      let inline: boolean
      try {
        inline = await this.writeBatch(buf, ends, dones)
        if (cp !== undefined) {
          const sealed = this.active.number
          this.roll(sealed + 2)
          cp.resolve({ captured, sealed, reserved: sealed + 1 })
        }
      } catch (e) {
        const err = e instanceof Error ? e : new Error(String(e))
        this.failure = err
        cp?.reject(err)
        const rest = this.dones
        this.dones = []
        this.ends = []
        this.staged = 0
        // The calls of the parts already synced were completed by writeBatch (it emptied their slots).
        for (const done of dones) done?.(err)
        for (const done of rest) done?.(err)
        this.running = false
        this.events.onFailed?.(err)
        return
      }
      if (buf.length <= KEEP_STAGE_BYTES) this.spare = buf
      // After an inline batch, one turn of the event loop before the next, as a write on the thread pool
      // gives (its completion comes through the loop's poll): the calls it completed resume their fibers
      // at once and queue the next records, so without it the loop would take batch after batch in
      // microtasks, and I/O waiting for the loop (a running checkpoint's read-back, timers) would wait
      // until the producers pause. Seen: a 1M keyed fill's running checkpoints fell minutes behind, and
      // the open after a crash replayed ~300 MB instead of ~10 (bench/README.md, session 17).
      if (inline) await new Promise<void>((resolve) => setImmediate(resolve))
    }
    this.running = false
  }

  /**
   * Write the records of `buf` (record i ends at `ends[i]`), rolling to a new segment where one would
   * pass `segmentBytes`. The calls of each part are completed once that part is durable (their slot in
   * `dones` is emptied), so a failure in a later part fails only what is not on disk. True if written inline.
   */
  private async writeBatch(
    buf: Buffer,
    ends: ReadonlyArray<number>,
    dones: Array<Completion | undefined>
  ): Promise<boolean> {
    const inline = this.inlineFor(ends.length)
    let start = 0
    let i = 0
    while (i < ends.length) {
      let to = start
      const first = i
      for (; i < ends.length; i++) {
        const end = ends[i]!
        if (end === to) continue // a marker
        const used = this.active.size + (to - start)
        if (used > 0 && used + (end - to) > this.segmentBytes) break
        to = end
      }
      const size = to - start
      if (size > 0) {
        const a = this.active
        const end = a.size + size
        if (inline) {
          // On this thread, as a synchronous commit: no hop to the thread pool and back.
          const t0 = this.clock()
          writeInline(a.fd, buf, start, to, a.size)
          let took = this.clock() - t0
          if (this.sync && end > a.length) await this.fillAhead(a, end)
          if (this.sync && O_DSYNC === 0) {
            const t1 = this.clock()
            fs.fdatasyncSync(a.fd)
            took += this.clock() - t1
          }
          if (took > SLOW_WRITE_MS && this.writes === "auto") {
            this.inlineFrom = this.clock() + POOL_SPELL_MS
            this.inlineLeft = 0
          }
        } else {
          await write(a.fd, buf.subarray(start, to), a.size)
          // Past the filled space: fill the next stretch (within the segment) before the same sync.
          if (this.sync && end > a.length) await this.fillAhead(a, end)
          // With O_DSYNC each write above returned durable; without it (no such flag here), one sync.
          if (this.sync && O_DSYNC === 0) await datasync(a.fd)
          // Before its calls complete (their callers may call again at once): did any arrive meanwhile?
          if (this.writes === "auto" && ends.length >= INLINE_MIN_CALLS) this.pooled(this.dones.length > 0)
        }
        a.size = end
        this.events.onWritten(this.active.number, size)
      }
      for (let j = first; j < i; j++) {
        const done = dones[j]!
        dones[j] = undefined
        done(undefined)
      }
      start = to
      if (i < ends.length) this.roll(this.active.number + 1)
    }
    return inline
  }

  /** Below this offset of the active segment the writer does not try to fill again (a fill failed there). */
  private fillFrom = 0

  /**
   * Write zeros after the records ending at `end`, up to `FILL_BYTES` within the segment. Never fails
   * the batch: a full disk keeps what it wrote (space the next records overwrite) and the writer tries
   * again only a stretch further on, appending to a growing file meanwhile, as without the fill.
   */
  private async fillAhead(a: ActiveSegment, end: number): Promise<void> {
    const fill = Math.min(FILL_BYTES, this.segmentBytes - end)
    if (fill <= 0 || end < this.fillFrom) return
    try {
      // Never take space others on the disk may need: only with plenty free (a small or nearly full
      // disk gets no fill, and the log appends to a growing file as without it).
      const free = fs.statfsSync(this.dir)
      if (free.bavail * free.bsize < FILL_MIN_FREE) {
        this.fillFrom = end + FILL_BYTES
        return
      }
      await write(a.fd, (fillZeros ??= Buffer.alloc(FILL_BYTES)).subarray(0, fill), end)
      a.length = end + fill
    } catch {
      this.fillFrom = end + FILL_BYTES
    }
  }

  /**
   * Cut the zeros filled past the active segment's records (and sync that), so that a sealed or
   * closed segment ends at its last record. Throws the I/O error.
   */
  private cutFill(): void {
    const a = this.active
    // The file's own length: a fill that failed part way may have left zeros past `length`.
    if (!this.sync || fs.fstatSync(a.fd).size <= a.size) return
    fs.ftruncateSync(a.fd, a.size)
    fs.fsyncSync(a.fd)
    a.length = a.size
  }

  /** Seal the active segment (already synced; cut to its records) and continue in a new, synced one. */
  private roll(number: number): void {
    this.cutFill()
    const { fd } = createSegment(this.dir, number, this.sync)
    fs.closeSync(this.active.fd)
    this.active = { number, fd, size: 0, length: 0 }
    this.fillFrom = 0
    this.events.onRoll(number)
  }

  /** Wait for everything queued, then close the segment. Never throws: a failure was already reported. */
  close(): Promise<void> {
    return new Promise((resolve) => {
      const finish = (): void => {
        this.closed = true
        try {
          // After a failure the owner cuts the segment to the durable frontier itself.
          if (this.failure === undefined) this.cutFill()
        } catch {
          // The zeros stay: recovery reads them as the end of the records.
        }
        try {
          fs.closeSync(this.active.fd)
        } catch {
          // already closed after a failure
        }
        resolve()
      }
      if (this.failure !== undefined) return finish()
      this.mark(finish)
    })
  }
}
