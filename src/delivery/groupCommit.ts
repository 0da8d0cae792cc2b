/**
 * Group commit: one writer loop owns the active segment. Callers hand it an encoded record and a
 * completion; the loop writes everything pending with one write and one fdatasync, then completes
 * every caller it covered. A failed write or sync fails every caller it covered and every later one:
 * the writer never retries a sync (after a failed fsync the page cache cannot be trusted), the log
 * must be re-opened through recovery.
 */
import * as fs from "node:fs"
import { createSegment } from "./segment.js"

/** Called once: `undefined` when the record is durable (or written, with `sync: false`). */
export type Completion = (error: Error | undefined) => void

interface Item {
  readonly buf: Buffer | undefined
  readonly done: Completion
}

/** The segment the writer appends to. */
export interface ActiveSegment {
  readonly number: number
  fd: number
  size: number
}

/** What the writer tells its owner. */
export interface WriterEvents {
  /** A new segment was created (synced with its directory) and is now the active one. */
  readonly onRoll: (number: number) => void
  /** Bytes were appended to segment `number` (durably, when syncing). */
  readonly onWritten: (number: number, bytes: number) => void
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

const datasync = (fd: number): Promise<void> =>
  new Promise((resolve, reject) => fs.fdatasync(fd, (err) => (err ? reject(err) : resolve())))

/** The single writer of a log directory. */
export class GroupCommitWriter {
  private pending: Array<Item> = []
  private running = false
  private failure: Error | undefined
  private closed = false
  private checkpoint: { capture: () => unknown; resolve: (c: Checkpoint<unknown>) => void; reject: (e: Error) => void } | undefined

  constructor(
    private readonly dir: string,
    private active: ActiveSegment,
    private readonly segmentBytes: number,
    private readonly sync: boolean,
    private readonly events: WriterEvents
  ) {}

  /** The error that stopped the writer, if one did. */
  get failed(): Error | undefined {
    return this.failure
  }

  /** Number of the segment being appended to. */
  get activeNumber(): number {
    return this.active.number
  }

  /**
   * Queue `buf` (or, with `undefined`, just a marker that completes once everything queued before it
   * is durable). Completes synchronously with the failure if the writer already failed.
   */
  enqueue(buf: Buffer | undefined, done: Completion): void {
    if (this.failure !== undefined) return done(this.failure)
    if (this.closed) return done(new Error("the writer is closed"))
    this.pending.push({ buf, done })
    this.kick()
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
    while (this.pending.length > 0 || this.checkpoint !== undefined) {
      const batch = this.pending
      this.pending = []
      const cp = this.checkpoint
      this.checkpoint = undefined
      const captured = cp?.capture()
      try {
        await this.writeBatch(batch)
        if (cp !== undefined) {
          const sealed = this.active.number
          this.roll(sealed + 2)
          cp.resolve({ captured, sealed, reserved: sealed + 1 })
        }
      } catch (e) {
        const err = e instanceof Error ? e : new Error(String(e))
        this.failure = err
        cp?.reject(err)
        const rest = this.pending
        this.pending = []
        for (const item of batch) item.done(err)
        for (const item of rest) item.done(err)
        this.running = false
        return
      }
      for (const item of batch) item.done(undefined)
    }
    this.running = false
  }

  private async writeBatch(batch: Array<Item>): Promise<void> {
    let i = 0
    while (i < batch.length) {
      const bufs: Array<Buffer> = []
      let size = 0
      for (; i < batch.length; i++) {
        const b = batch[i]!.buf
        if (b === undefined) continue
        const used = this.active.size + size
        if (used > 0 && used + b.length > this.segmentBytes) break
        bufs.push(b)
        size += b.length
      }
      if (size > 0) {
        const one = bufs.length === 1 ? bufs[0]! : Buffer.concat(bufs, size)
        await write(this.active.fd, one, this.active.size)
        if (this.sync) await datasync(this.active.fd)
        this.active.size += size
        this.events.onWritten(this.active.number, size)
      }
      if (i < batch.length) this.roll(this.active.number + 1)
    }
  }

  /** Seal the active segment (already synced) and continue in a new, synced one. */
  private roll(number: number): void {
    const { fd } = createSegment(this.dir, number, this.sync)
    fs.closeSync(this.active.fd)
    this.active = { number, fd, size: 0 }
    this.events.onRoll(number)
  }

  /** Wait for everything queued, then close the segment. Never throws: a failure was already reported. */
  close(): Promise<void> {
    return new Promise((resolve) => {
      const finish = (): void => {
        this.closed = true
        try {
          fs.closeSync(this.active.fd)
        } catch {
          // already closed after a failure
        }
        resolve()
      }
      if (this.failure !== undefined) return finish()
      this.enqueue(undefined, finish)
    })
  }
}
