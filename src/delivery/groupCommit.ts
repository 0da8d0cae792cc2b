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
import { BATCH_RECORD_BYTES, sealBatch } from "./record.js"
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

/**
 * `maxWritesInFlight: 2`: the fewest calls a batch must cover to be written while another write is in
 * flight (and a batch of this many is written as soon as it is staged, not at the end of the tick).
 * Smaller batches wait for the write in flight: every second write covers at least this many calls.
 */
export const PIPELINE_MIN_CALLS = 32

/** `maxWritesInFlight: 2`: a batch written while another may be in flight, until it is acknowledged. */
interface Flight {
  readonly buf: Buffer
  readonly dones: Array<Completion | undefined>
  /** Where it starts in the active segment, and its bytes. */
  readonly at: number
  readonly size: number
  /** 0: on its way; 1: durable; 2: failed (`error`). */
  state: 0 | 1 | 2
  error: Error | undefined
}

const TWO_32 = 0x1_0000_0000

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
    private readonly clock: () => number = () => performance.now(),
    /**
     * `maxWritesInFlight`: 1, or 2: a second batch of at least `PIPELINE_MIN_CALLS` calls is written (on the
     * thread pool) while the first is on its way, every batch starts with a batch record (format 3), and
     * batches are acknowledged strictly in order.
     */
    inFlight: 1 | 2 = 1
  ) {
    this.lead = inFlight === 2 ? BATCH_RECORD_BYTES : 0
    this.staged = this.lead
  }

  /** `maxWritesInFlight: 2`: the bytes kept at the start of every staging buffer for its batch record; else 0. */
  private readonly lead: number
  /** `maxWritesInFlight: 2`: the writes on their way (or durable and waiting for an earlier one), in file order. */
  private flights: Array<Flight> = []
  /** `maxWritesInFlight: 2`: the staging buffers free for reuse beside `spare`. */
  private spares: Array<Buffer> = []
  /** `maxWritesInFlight: 2`: a write or sync failed; the failure is reported once every write in flight returned. */
  private stopping: Error | undefined
  /** `maxWritesInFlight: 2`: a batch is being written by `writeBatch` (a roll, a fill, a checkpoint, markers only). */
  private serial = false
  /** `maxWritesInFlight: 2`: a `pump` is due on the next turn. */
  private pumpDue = false
  /** `close` was called. */
  private closing = false

  /** `writes: "auto"`: big batches in a row written on the thread pool with no call arriving meanwhile. */
  private idleWrites = 0
  /** `writes: "auto"`: big batches still to be written inline before the next look from the thread pool. */
  private inlineLeft = 0

  /** Is a batch of `calls` calls written on the event loop's thread (see `OpenOptions.writes`)? */
  inlineFor(calls: number): boolean {
    // Two writes in flight: on the thread pool (an inline write would hold the event loop through its sync).
    if (this.lead > 0) return false
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

  /**
   * Bytes staged in the buffer being filled: the next record `reserve` places starts there. 0 while it
   * holds no record (with `maxWritesInFlight: 2`, not even its batch record, which is written only with one).
   */
  get staging(): number {
    return this.staged === this.lead ? 0 : this.staged
  }

  /** The staging buffer that `reserve` made room in. */
  get buffer(): Buffer {
    return this.stage
  }

  /** Queue the record just framed at the end of the staging buffer; `done` runs once it is durable. */
  push(done: Completion): void {
    this.ends.push(this.staged)
    this.dones.push(done)
    if (this.lead === 0) return this.kick()
    // Two in flight: a batch big enough goes at once (while the rest of the tick's calls gather behind it).
    if (this.dones.length >= PIPELINE_MIN_CALLS && this.flights.length < 2) this.pump(true)
    else this.schedulePump()
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
    if (this.lead > 0) return this.schedulePump()
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
      let inline: boolean
      try {
        inline = await this.writeCapturing(buf, ends, dones, cp)
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
   * `writeBatch`, with the capture of `cp` (a compaction's checkpoint) taken first, synchronously (it sees
   * exactly the records of the batch taken), and after the write the segment sealed for it. True if inline.
   */
  private async writeCapturing(
    buf: Buffer,
    ends: ReadonlyArray<number>,
    dones: Array<Completion | undefined>,
    cp: GroupCommitWriter["checkpoint"]
  ): Promise<boolean> {
    const captured = cp?.capture()
    const inline = await this.writeBatch(buf, ends, dones)
    if (cp !== undefined) {
      const sealed = this.active.number
      this.roll(sealed + 2)
      cp.resolve({ captured, sealed, reserved: sealed + 1 })
    }
    return inline
  }

  /** A free staging buffer. */
  private nextStage(): Buffer {
    const b = this.spare ?? this.spares.pop() ?? Buffer.allocUnsafeSlow(STAGE_BYTES)
    this.spare = undefined
    return b
  }

  /** `buf`'s batch was written: keep it for reuse (two at most beside the one being filled). */
  private recycle(buf: Buffer): void {
    if (buf.length > KEEP_STAGE_BYTES) return
    if (this.spare === undefined) this.spare = buf
    else if (this.spares.length < 2) this.spares.push(buf)
  }

  /** The lsn of the first record of a batch staged in `buf` (it follows the batch record's room). */
  private firstLsn(buf: Buffer): number {
    return buf.readUInt32BE(this.lead + 8) * TWO_32 + buf.readUInt32BE(this.lead + 12)
  }

  /** `maxWritesInFlight: 2`: `pump` on the next turn of the event loop (once). */
  private schedulePump(): void {
    if (this.pumpDue) return
    this.pumpDue = true
    setImmediate(() => {
      this.pumpDue = false
      this.pump(false)
    })
  }

  /**
   * `maxWritesInFlight: 2`: start the next write if one may start now. With nothing in flight, the
   * batch staged so far goes: as a flight when it fits the filled space of the segment (no roll, no fill,
   * no checkpoint, a record in it), else through `writeBatch` alone. With one in flight, a second flight
   * starts only for a batch of at least `PIPELINE_MIN_CALLS` calls that fits. `fromPush`: inside a
   * caller's call, where only a flight may start (the other path captures a checkpoint).
   */
  private pump(fromPush: boolean): void {
    if (this.failure !== undefined || this.stopping !== undefined || this.serial) return
    if (this.dones.length === 0 && this.checkpoint === undefined) return
    const n = this.flights.length
    if (n >= 2) return
    const flies = this.checkpoint === undefined && !this.closing && this.flies()
    if (n === 0) {
      if (flies) return this.fly()
      if (fromPush) return this.schedulePump()
      this.serial = true
      void this.runSerial()
      return
    }
    if (flies && this.dones.length >= PIPELINE_MIN_CALLS) this.fly()
  }

  /** Where the next write starts in the active segment: after the writes in flight. */
  private submitted(): number {
    const last = this.flights[this.flights.length - 1]
    return last === undefined ? this.active.size : last.at + last.size
  }

  /** Does the staged batch hold a record and fit the segment's filled space after the writes in flight? */
  private flies(): boolean {
    if (this.staged === this.lead) return false
    const end = this.submitted() + this.staged
    return end <= this.segmentBytes && (!this.sync || end <= this.active.length)
  }

  /**
   * `maxWritesInFlight: 2`: write the staged batch on the thread pool, its batch record first, naming
   * the offset below which every byte is durable now (where the oldest write not yet acknowledged starts).
   */
  private fly(): void {
    const buf = this.stage
    const size = this.staged
    const dones = this.dones
    this.stage = this.nextStage()
    this.takenBytes += size
    this.staged = this.lead
    this.ends = []
    this.dones = []
    const a = this.active
    const at = this.submitted()
    sealBatch(buf, 0, this.firstLsn(buf), a.size)
    const f: Flight = { buf, dones, at, size, state: 0, error: undefined }
    this.flights.push(f)
    const written = write(a.fd, buf.subarray(0, size), at)
    // With O_DSYNC the write returned durable; without it (no such flag here), its own sync.
    void (this.sync && O_DSYNC === 0 ? written.then(() => datasync(a.fd)) : written).then(
      () => {
        f.state = 1
        this.settle()
      },
      (e: unknown) => {
        f.state = 2
        f.error = e instanceof Error ? e : new Error(String(e))
        this.stopping ??= f.error
        this.settle()
      }
    )
  }

  /**
   * `maxWritesInFlight: 2`: acknowledge the flights that are durable, strictly in file order (a durable
   * one waits for every one before it), then start the next write. After a failure nothing more
   * starts, and the failure is reported once every write on its way returned: none may land after the
   * owner cuts the segment back to the acknowledged bytes, or closes its descriptor.
   */
  private settle(): void {
    const flights = this.flights
    while (flights.length > 0 && flights[0]!.state === 1) {
      const f = flights.shift()!
      const a = this.active
      a.size = f.at + f.size
      this.events.onWritten(a.number, f.size)
      for (const done of f.dones) done?.(undefined)
      this.recycle(f.buf)
    }
    const stop = this.stopping
    if (stop === undefined) return this.pump(false)
    if (this.flights.some((f) => f.state === 0)) return
    const failed = this.flights
    this.flights = []
    const dones: Array<Completion | undefined> = []
    for (const f of failed) dones.push(...f.dones)
    this.fail(stop, dones)
  }

  /** `maxWritesInFlight: 2`: the staged batch through `writeBatch`, alone (nothing else in flight). */
  private async runSerial(): Promise<void> {
    const buf = this.stage
    const ends = this.ends
    const dones = this.dones
    this.stage = this.nextStage()
    // Only a batch with a record is written (its batch record with it): a marker-only one takes no bytes.
    if (this.staged > this.lead) this.takenBytes += this.staged
    this.staged = this.lead
    this.ends = []
    this.dones = []
    const cp = this.checkpoint
    this.checkpoint = undefined
    try {
      await this.writeCapturing(buf, ends, dones, cp)
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e))
      cp?.reject(err)
      this.serial = false
      this.fail(err, dones)
      return
    }
    this.recycle(buf)
    this.serial = false
    this.pump(false)
  }

  /** `maxWritesInFlight: 2`: stop for good, failing `dones` and every call staged since. */
  private fail(err: Error, dones: ReadonlyArray<Completion | undefined>): void {
    this.failure = err
    const rest = this.dones
    this.dones = []
    this.ends = []
    this.staged = this.lead
    const cp = this.checkpoint
    this.checkpoint = undefined
    cp?.reject(err)
    for (const done of dones) done?.(err)
    for (const done of rest) done?.(err)
    this.events.onFailed?.(err)
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
    // With `maxWritesInFlight: 2` the batch's first bytes are room for its batch record, written with its first record.
    const lead = this.lead
    const records = lead > 0 && ends.length > 0 && ends[ends.length - 1]! > lead
    let start = 0
    let i = 0
    while (i < ends.length) {
      let to = start
      const first = i
      const skip = start === 0 ? lead : 0
      for (; i < ends.length; i++) {
        const end = ends[i]!
        if (end === to || end <= skip) continue // a marker (before the first record: its batch record's room)
        const used = this.active.size + (to - start)
        if (used > 0 && used + (end - to) > this.segmentBytes) break
        to = end
      }
      const size = to - start
      if (size > 0) {
        const a = this.active
        const end = a.size + size
        // Nothing else is in flight: every byte before this write is durable.
        if (records && start === 0) sealBatch(buf, 0, this.firstLsn(buf), a.size)
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
    // Two in flight: no flight starts from now on, so that the close's marker goes through `writeBatch`
    // once nothing is in flight (its cut and the descriptor's close follow every write).
    this.closing = true
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
