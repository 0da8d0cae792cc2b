/**
 * The file log's engine, in plain callback style so that the hot path (validate, encode, apply, hand to
 * the group-commit writer) runs in one synchronous step: records reach the file in the order their
 * changes were applied to the state, which is the order replay applies them.
 */
import { Checkpointer } from "./checkpointer.js"
import type { CompactionHooks } from "./compaction.js"
import * as calls from "./entryCalls.js"
import { type CallHost, type Done } from "./entryCalls.js"
import { EntryData } from "./entryData.js"
import { DeliveryLogError } from "./errors.js"
import { stageIdRecord, tooLarge } from "./framing.js"
import { GroupCommitWriter } from "./groupCommit.js"
import { type AppendDone, InFlight } from "./inflight.js"
import { KeyedPlaces, readFailure } from "./keyedPlaces.js"
import { releaseLock } from "./lockfile.js"
import { LockWatch } from "./lockWatch.js"
import { checkpointAtClose, cutToFrontier } from "./logClose.js"
import { LogCompaction } from "./logCompaction.js"
import { closedError, ioError } from "./logErrors.js"
import { openLogFiles, type OpenNotes } from "./logOpen.js"
import { writeManifest } from "./manifest.js"
import { MessageBytes, textOf } from "./messageBytes.js"
import { appendBytes, utf8Bytes, writeAppendFields } from "./payload.js"
import { HEADER_BYTES, Kind, seal } from "./record.js"
import type { KeptSegment } from "./recovery.js"
import type { LogState } from "./state.js"
import { ARENA_TEXT_MAX } from "./textArena.js"
import type { DeliveryEntry, OutboundMessage } from "./types.js"
import { UUID_CHARS, writeUuid } from "./uuid.js"
import { checkMessage, type ResolvedOptions } from "./validate.js"

/** Slack over `maxRecordBytes` allowed when reading: snapshot entries carry their attempt state too. */
const READ_SLACK = 64 * 1024

/** The bits of the id an append writes. */
const idWords = new Uint32Array(4)

/** The `DeliveryEntry` of a fresh append (as `EntryData.toEntry` makes it for one). */
const freshEntry = (id: string, seq: number, message: OutboundMessage, enqueuedAt: number): DeliveryEntry => ({
  id,
  seq,
  message,
  enqueuedAt,
  attempts: 0,
  status: "pending"
})

export type { Done } from "./entryCalls.js"
export type { OpenNotes } from "./logOpen.js"

/** The open log: state, writer, segment list. Owned by `openFileLog`, which wraps it in Effects. */
export class LogCore implements CallHost {
  private closed = false
  private closing: Promise<void> | undefined
  private released = false
  /** Appends staged whose record is not durable yet (counted in `state.pending`, not listed). */
  private uncommitted = 0
  private lastNow = 0
  /** The id of the entry the last `append` staged a record for (`appendAndMark` reads it right after the call). */
  private lastStaged: string | undefined
  /** The append path's check-and-encode walk and its scratch buffer. */
  private readonly messageBytes = new MessageBytes()
  /** Called when dead weight passed the threshold; the owner runs `compact()` in the background. */
  onCompactionWanted: () => void = () => {}
  /** Called once when the writer failed: the core accepts no more writes, the owner re-opens the log. */
  onFailed: (error: DeliveryLogError) => void = () => {}
  /** Where the records of keyed entries are (read back on a repeated key, moved by compaction). */
  private readonly places: KeyedPlaces
  /** The files' bytes, when to compact, and compacting (logCompaction.ts). */
  private readonly compaction: LogCompaction
  /** Writes the CHECKPOINT while the log runs (so that an open after a crash replays little) and at close. */
  private readonly checkpoints: Checkpointer
  /** Whether the directory and its lock are still there (lockWatch.ts): once not, no call is taken. */
  private readonly lockWatch: LockWatch

  private constructor(
    private readonly o: ResolvedOptions,
    private readonly lockPath: string,
    readonly state: LogState,
    private nextLsn: number,
    private readonly segments: Map<number, KeptSegment>,
    private readonly writer: GroupCommitWriter,
    private readonly hooks: CompactionHooks,
    /** The address of the writer's first byte, and the segment it writes. */
    writerBase: number,
    active: number,
    replayed: number
  ) {
    this.lockWatch = new LockWatch(o.dir, lockPath)
    this.places = new KeyedPlaces(o.dir, o.maxRecordBytes + READ_SLACK, state.addresses, writerBase, active)
    this.checkpoints = new Checkpointer(o.dir, o.sync, o.segmentBytes, state.addresses, segments, replayed, hooks.step)
    this.compaction = new LogCompaction({
      o,
      hooks,
      state,
      segments,
      places: this.places,
      readSlack: READ_SLACK,
      refuse: () => this.refuse(),
      checkpoint: (capture) => writer.requestCheckpoint(capture),
      now: () => this.lastNow,
      nextLsn: () => this.nextLsn,
      saveManifest: () => this.saveManifest(),
      // A running checkpoint covers the files a compaction replaces: it finishes first.
      checkpointsIdle: () => this.checkpoints.idle(),
      replaced: () => this.checkpoints.replaced()
    })
  }

  /**
   * Create the directory, take the lock (or keep `heldLock`, the path of a lock this process holds:
   * a re-open), recover, and start the writer. Throws `DeliveryLogError`.
   */
  static open(
    o: ResolvedOptions,
    now: number,
    hooks: CompactionHooks,
    heldLock?: string
  ): { core: LogCore; notes: OpenNotes } {
    return openLogFiles(o, hooks, READ_SLACK, heldLock, ({ active, lockPath, notes, recovered: r, segments }) => {
      let core: LogCore | undefined
      const writer = new GroupCommitWriter(o.dir, active, o.segmentBytes, o.sync, {
        onRoll: (n) => core?.rolled(n),
        onWritten: (n, b) => core?.written(n, b),
        onFailed: (e) => core?.onFailed(ioError(o.dir, e))
      }, o.writes)
      core = new LogCore(
        o,
        lockPath,
        r.state,
        r.nextLsn,
        segments,
        writer,
        hooks,
        r.nextAddress,
        active.number,
        r.replayed
      )
      try {
        core.saveManifest()
      } catch {
        // A full disk: the MANIFEST on disk still holds (what it lists exists, its sizes are lower bounds);
        // the next roll or close writes it, or fails the writer.
      }
      core.lastNow = now
      r.state.evict(now, o.dedupeWindowMs)
      return { core, notes }
    })
  }

  private rolled(number: number): void {
    this.segments.set(number, { number, kind: "log", bytes: 0, crc: 0, crcTo: 0 })
    // Before the first record goes there (a throw fails the writer): the sealed size and the new segment are on record.
    this.saveManifest()
  }

  /** Write the MANIFEST: the snapshot in force, and every `.log` after it with its size now. Throws the I/O error. */
  private saveManifest(): void {
    let snapshot: number | null = null
    const logs: Array<{ number: number; bytes: number }> = []
    for (const s of this.segments.values()) {
      if (s.kind === "snap") snapshot = s.number
      else logs.push({ number: s.number, bytes: s.bytes })
    }
    logs.sort((a, b) => a.number - b.number)
    writeManifest(this.o.dir, { snapshot, next: this.compaction.installing, segments: logs }, this.o.sync)
  }

  private written(number: number, bytes: number): void {
    const s = this.segments.get(number)
    this.places.written(number, s?.bytes ?? 0, bytes)
    if (s !== undefined) s.bytes += bytes
    if (this.compaction.written(bytes)) this.onCompactionWanted()
    this.checkpoints.written(bytes, this.compaction.compacting, this.captureAt, this.markAll)
  }

  /** The log now, for a running checkpoint: the state is exactly the records staged before `end`. */
  private readonly captureAt = () => ({
    state: this.state,
    nextLsn: this.nextLsn,
    end: this.places.addressOf(this.writer.taken, this.writer.staging)
  })

  private readonly markAll = (done: (error: Error | undefined) => void): void => this.writer.mark(done)

  /** The reason every call fails now, if any. */
  refuse(): DeliveryLogError | undefined {
    // First: finding the lock gone starts a re-open, which closes this core at once.
    if (this.lockWatch.lost !== undefined) return this.lockWatch.lost
    if (this.closed) return closedError()
    const f = this.writer.failed
    return f === undefined ? undefined : ioError(this.o.dir, f)
  }

  /** Stage an id-keyed record (see `stageIdRecord`), taking the next lsn if it was staged. */
  frameId(
    kind: Kind,
    id: string,
    fixed: number,
    text: string | undefined,
    what: string,
    fill?: (buf: Buffer, at: number) => void
  ): DeliveryLogError | undefined {
    const no = stageIdRecord(this.writer, this.o.maxRecordBytes, this.nextLsn, kind, id, fixed, text, what, fill)
    if (no === undefined) this.nextLsn++
    return no
  }

  /** The latest time the acked window was evicted at. */
  private evictedAt = Number.NEGATIVE_INFINITY

  /**
   * Forget what the dedupe window let go of by `now`: once per millisecond (calls within one find
   * nothing new to evict; an earlier `now` neither), not on every call.
   */
  private evictAt(now: number): void {
    if (now <= this.evictedAt) return
    this.evictedAt = now
    this.state.evict(now, this.o.dedupeWindowMs)
  }

  /**
   * A call at `now`: is the lock still there (checked at most once a second)? Once it is not, every call
   * is refused and the owner heals (healer.ts: re-open once the folder is there again, taking the lock anew).
   */
  private watchLock(now: number): void {
    if (this.lockWatch.check(now)) this.onFailed(this.lockWatch.lost!)
  }

  /** The error the core was stopped with because its directory or lock went away, if it was. */
  get lockLost(): DeliveryLogError | undefined {
    return this.lockWatch.lost
  }

  /** A call at `now` (an ack): remembered, and the dedupe window evicted by then. */
  touch(now: number): void {
    this.watchLock(now)
    this.lastNow = now
    this.evictAt(now)
  }

  /** Complete `done` once everything queued so far is durable. */
  afterDurable<A>(value: () => A, done: Done<A>): void {
    this.writer.mark((err) => (err ? done(ioError(this.o.dir, err)) : done(undefined, value())))
  }

  /** Complete `done` with `value` once the record just staged is durable. */
  pushed<A>(value: A, done: Done<A>): void {
    this.writer.push((err) => (err ? done(ioError(this.o.dir, err)) : done(undefined, value)))
  }

  /** The appends staged and not yet durable, completed oldest first by `appendDurable`. */
  private readonly inflight = new InFlight()

  /** The writer's completion of every append record (they complete in the order they were staged). */
  private readonly appendDurable = (err: Error | undefined): void => {
    const t = this.inflight.take()
    // A failed append stays uncommitted (never listed or counted) in this core, which takes no more writes.
    if (err) return t.done(ioError(this.o.dir, err), undefined, t.arg)
    this.uncommitted--
    this.state.live.setCommitted(t.slot)
    t.done(undefined, t.entry, t.arg)
  }

  /**
   * Append `m`: `done(error, entry, arg)` once its record is durable (or at once with why not). One
   * `done` may serve every call, `arg` telling them apart: nothing is allocated per call to complete it.
   */
  append<X>(m: OutboundMessage, now: number, done: AppendDone<X>, arg: X): void {
    this.watchLock(now)
    const no = this.refuse()
    if (no) return done(no, undefined, arg)
    // The plain path checks, copies and encodes in one walk; anything else (and every error) goes
    // through `checkMessage`, which encodes with JSON.stringify (the same bytes) or says what is wrong.
    const enc = this.messageBytes
    const texts = this.state.texts
    // Encoded straight into the texts' arena, where an appended entry's text stays (no copy to keep it).
    let copy = enc.encode(m, this.o.maxRecordBytes, texts.buf, texts.freeAt)
    let json: string | undefined
    let key: string | undefined
    if (copy !== undefined) key = copy.idempotencyKey
    else {
      const checked = checkMessage(m)
      if (checked instanceof DeliveryLogError) return done(checked, undefined, arg)
      json = checked.json
      key = checked.key
      copy = checked.message
    }
    this.lastNow = now
    const state = this.state
    this.evictAt(now)
    if (key !== undefined) {
      const id = state.keys.get(key)
      if (id !== undefined) {
        const live = state.live.get(id)
        if (live !== undefined) {
          return live.committed
            ? done(undefined, live.toEntry(), arg)
            : this.afterDurable(() => live.toEntry(), (e, v) => done(e, v, arg))
        }
        const acked = state.acked.entry(id)
        if (acked !== undefined) return this.afterDurable(() => acked.toEntry(), (e, v) => done(e, v, arg))
      }
      const hit = this.ackedByKey(key)
      if (hit instanceof DeliveryLogError) return done(hit, undefined, arg)
      if (hit !== undefined) return this.afterDurable(() => hit.toEntry(), (e, v) => done(e, v, arg))
    }
    const seq = state.nextSeq
    const keyBytes = key === undefined ? 0 : utf8Bytes(key)
    const textBytes = json === undefined ? enc.bytes : utf8Bytes(json)
    const payloadBytes = appendBytes(UUID_CHARS, keyBytes, textBytes)
    const big = tooLarge(this.o.maxRecordBytes, payloadBytes, "the message")
    if (big) return done(big, undefined, arg)
    const at = this.writer.reserve(HEADER_BYTES + payloadBytes)
    const buf = this.writer.buffer
    const pos = this.places.addressOf(this.writer.taken, at)
    // The id is written as ASCII in its place in the record, and read back as one string.
    const idAt = at + HEADER_BYTES + 1
    buf[idAt - 1] = UUID_CHARS
    writeUuid(buf, idAt, idWords)
    const id = textOf(buf, idAt, idAt + UUID_CHARS, true)
    const textAt = writeAppendFields(buf, idAt + UUID_CHARS, seq, now, key, keyBytes)
    // A plain message's text stays in the arena (off the heap), not in a string the entry keeps.
    let text: string | undefined = json
    if (json === undefined) {
      enc.buf.copy(buf, textAt, enc.start, enc.start + textBytes)
      if (textBytes > ARENA_TEXT_MAX) text = textOf(buf, textAt, textAt + textBytes, enc.ascii)
    } else buf.write(json, textAt, textBytes, "utf8")
    seal(buf, at, this.nextLsn++, Kind.append, payloadBytes)
    const bytes = HEADER_BYTES + payloadBytes
    let slot: number
    // A plain message without key (its text in the arena): held by slot only, no object (liveEntries.ts).
    const placed = text === undefined && key === undefined ? texts.place(enc.buf, enc.start, textBytes) : -1
    if (placed >= 0) {
      slot = state.live.addPlain(idWords, seq, now, pos, bytes, texts.currentNo, placed, textBytes, enc.ascii, false)
      state.addedPlain(seq, bytes)
    } else {
      const data = new EntryData(id, seq, now, key, text, 0, undefined, undefined, "pending", false, bytes)
      data.pos = pos
      if (text === undefined) texts.adopt(enc.buf, enc.start, textBytes, enc.ascii, data)
      slot = state.insertNew(data)
    }
    this.uncommitted++
    this.lastStaged = id
    // Nobody knows the id before this call returns, so the entry cannot change before it is durable: it is
    // made now. The copy made while checking the body is the message as replay will parse it from the record.
    this.inflight.push(slot, copy === undefined ? state.live.toEntry(slot) : freshEntry(id, seq, copy, now), done, arg)
    this.writer.push(this.appendDurable)
  }

  /**
   * `append(m)`, and when it staged a new record, `markStarted` of that entry staged right after it (one
   * commit for both). `done(error, entry, marked)` once both are durable: the append's error or entry as
   * `append` gives them; `marked` false when no mark was written (an idempotency key's existing entry) or it failed.
   */
  appendAndMark(
    m: OutboundMessage,
    now: number,
    done: (error: DeliveryLogError | undefined, entry: DeliveryEntry | undefined, marked: boolean) => void
  ): void {
    let returned = false
    let appended: { error: DeliveryLogError | undefined; entry: DeliveryEntry | undefined } | undefined
    // undefined: no mark staged (yet); null: staged, not settled; else settled (true: durable).
    let mark: boolean | null | undefined
    const finish = () => {
      if (returned && appended !== undefined && mark !== null) done(appended.error, appended.entry, mark === true)
    }
    this.lastStaged = undefined
    this.append(m, now, (error, entry) => {
      appended = { error, entry }
      finish()
    }, undefined)
    const staged = this.lastStaged as string | undefined
    this.lastStaged = undefined
    if (staged !== undefined) {
      mark = null
      calls.markStarted(this, staged, (error) => {
        mark = error === undefined
        finish()
      })
    }
    returned = true
    finish()
  }

  /** The keyed entry acked within the window under `key` (its record read back), or why it cannot be checked. */
  private ackedByKey(key: string): EntryData | DeliveryLogError | undefined {
    try {
      return this.state.acked.findKey(key, this.places.read)
    } catch (e) {
      return readFailure(this.o.dir, e)
    }
  }

  attempt(
    id: string,
    failure: { readonly error: string; readonly nextAttemptAt: number; readonly dead?: boolean },
    done: Done<DeliveryEntry>
  ): void {
    calls.attempt(this, id, failure, done)
  }

  ack(id: string, now: number, done: Done<void>): void {
    calls.ack(this, id, now, done)
  }

  deadLetter(id: string, reason: string, done: Done<void>): void {
    calls.deadLetter(this, id, reason, done)
  }

  requeue(id: string, done: Done<void>): void {
    calls.requeue(this, id, done)
  }

  markStarted(id: string, done: Done<void>): void {
    calls.markStarted(this, id, done)
  }

  ackAndMark(
    id: string,
    next: string,
    now: number,
    done: (ackError: DeliveryLogError | undefined, markError: DeliveryLogError | undefined) => void
  ): void {
    calls.ackAndMark(this, id, next, now, done)
  }

  flush(done: Done<void>): void {
    calls.flush(this, done)
  }

  /** Committed entry `id`, if pending or dead (a fresh object: its message parsed from the log's text). */
  get(id: string): DeliveryEntry | undefined {
    return calls.get(this.state, id)
  }

  /** Committed entries with `status`, in seq order (fresh objects). */
  list(status: "pending" | "dead"): Array<DeliveryEntry> {
    return calls.list(this.state, status)
  }

  stats(): { pending: number; dead: number; segments: number; bytes: number } {
    // Appends not yet durable are not listed by `pending`: not counted either.
    return {
      pending: this.state.pending - this.uncommitted,
      dead: this.state.dead,
      segments: this.segments.size,
      bytes: this.compaction.bytes
    }
  }

  /** Run one compaction after any running one. Rejects with `DeliveryLogError`. */
  compact(): Promise<void> {
    return this.compaction.compact()
  }

  /**
   * Refuse new calls, wait for compaction and queued records, close files, release the lock (kept
   * with `keepLock`, for a re-open). After a failed write, the bytes past the durable frontier (a
   * failed batch, never reported durable) are cut, so a re-open shows exactly what was acknowledged.
   */
  async close(keepLock = false): Promise<string | undefined> {
    if (this.closing === undefined) {
      this.closed = true
      this.closing = (async () => {
        await this.compaction.settled
        await this.writer.close()
        // The directory or its lock was taken from under the log: write nothing more there (another
        // process may hold it now); the files are left as they are.
        if (this.lockWatch.lost !== undefined) {
          await this.checkpoints.idle()
          this.places.close()
          return
        }
        if (this.writer.failed !== undefined) cutToFrontier(this.o.dir, this.writer.frontier, this.o.sync)
        // The sizes now, so that a segment cut short later is refused (best effort: a full disk keeps the last one).
        try {
          this.saveManifest()
        } catch {
          // the MANIFEST written at the last roll still holds (its sizes are lower bounds)
        }
        await this.checkpoints.idle()
        this.places.close()
        // Only when every record was written: the checkpoint stands for the files as they are.
        if (this.writer.failed === undefined) {
          checkpointAtClose(this.o.dir, () => this.checkpoints.atClose(this.state, this.nextLsn))
        }
      })()
    }
    await this.closing
    if (!keepLock && !this.released) {
      this.released = true
      // A warning (never a throw) when the directory became unwritable: the caller logs it.
      return releaseLock(this.lockPath)
    }
    return undefined
  }

  /** The lock file this core holds. */
  get lock(): string {
    return this.lockPath
  }
}
