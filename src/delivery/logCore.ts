/**
 * The file log's engine, in plain callback style so that the hot path (validate, encode, apply, hand to
 * the group-commit writer) runs in one synchronous step: records reach the file in the order their
 * changes were applied to the state, which is the order replay applies them.
 */
import * as fs from "node:fs"
import { join } from "node:path"
import { CHECKPOINT } from "./checkpoint.js"
import { Checkpointer } from "./checkpointer.js"
import { type Captured, type CompactionHooks, removeReplaced, writeSnapshot } from "./compaction.js"
import { DeliveryLogError } from "./errors.js"
import { stageIdRecord, tooLarge } from "./framing.js"
import { describeFsError, fsErrorPath, makeDirectory } from "./fsError.js"
import { type ActiveSegment, GroupCommitWriter } from "./groupCommit.js"
import { type AppendDone, InFlight } from "./inflight.js"
import { KeyedPlaces, readFailure } from "./keyedPlaces.js"
import { acquireLock, releaseLock } from "./lockfile.js"
import { writeManifest } from "./manifest.js"
import { MessageBytes, textOf } from "./messageBytes.js"
import { appendBytes, EntryData, utf8Bytes, writeAppendFields } from "./payload.js"
import { HEADER_BYTES, Kind, seal } from "./record.js"
import { CorruptLog, finishRecovery, type KeptSegment, recover } from "./recovery.js"
import { createSegment, DIR_MODE, fileCode, segmentName } from "./segment.js"
import type { LogState } from "./state.js"
import type { DeliveryEntry, OutboundMessage } from "./types.js"
import { UUID_CHARS, writeUuid } from "./uuid.js"
import { checkMessage, clipError, type ResolvedOptions } from "./validate.js"

/** Completion of a call: an error, or the value. */
export type Done<A> = (error: DeliveryLogError | undefined, value?: A) => void

/** Slack over `maxRecordBytes` allowed when reading: snapshot entries carry their attempt state too. */
const READ_SLACK = 64 * 1024

const ioError = (dir: string, e: unknown): DeliveryLogError =>
  new DeliveryLogError({
    reason: "io",
    message: `Writing the delivery log failed (${
      (e as NodeJS.ErrnoException)?.code ?? String(e)
    }); the log re-opens itself through recovery (see health) and keeps every record reported durable; free the space or fix the disk`,
    path: dir
  })

const closedError = (): DeliveryLogError =>
  new DeliveryLogError({ reason: "closed", message: "The delivery log is closed; open it again to use it" })

const unknownId = (id: string): DeliveryLogError =>
  new DeliveryLogError({
    reason: "unknown-id",
    message:
      `Expected the id of an entry in the log, got \`${id}\`: it was never appended here, or it was acked more than \`dedupeWindowMs\` ago`
  })

/** What opening found, for the caller to log. */
export interface OpenNotes {
  readonly truncated?: { readonly path: string; readonly offset: number; readonly why: string }
  readonly tookOverLockFrom?: number
  /** The directory had segments but no MANIFEST (an older version): one was written. */
  readonly wroteManifest?: boolean
  /** Recovery started from the CHECKPOINT (it matched every file it covers). */
  readonly fromCheckpoint?: boolean
}

/** The open log: state, writer, segment list. Owned by `openFileLog`, which wraps it in Effects. */
export class LogCore {
  private closed = false
  private closing: Promise<void> | undefined
  private released = false
  /** Appends staged whose record is not durable yet (counted in `state.pending`, not listed). */
  private uncommitted = 0
  private compaction: Promise<void> = Promise.resolve()
  private compacting = false
  private totalBytes = 0
  private lastNow = 0
  /** Size of the newest snapshot: the log must grow past it (and past a segment) before compacting again. */
  private baseline = 0
  /** The append path's check-and-encode walk and its scratch buffer. */
  private readonly messageBytes = new MessageBytes()
  /** Called when dead weight passed the threshold; the owner runs `compact()` in the background. */
  onCompactionWanted: () => void = () => {}
  /** Called once when the writer failed: the core accepts no more writes, the owner re-opens the log. */
  onFailed: (error: DeliveryLogError) => void = () => {}
  /** Where the records of keyed entries are (read back on a repeated key, moved by compaction). */
  private readonly places: KeyedPlaces
  /** Writes the CHECKPOINT while the log runs (so that an open after a crash replays little) and at close. */
  private readonly checkpoints: Checkpointer

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
    for (const s of segments.values()) {
      this.totalBytes += s.bytes
      if (s.kind === "snap") this.baseline = s.bytes
    }
    this.places = new KeyedPlaces(o.dir, o.maxRecordBytes + READ_SLACK, state.addresses, writerBase, active)
    this.checkpoints = new Checkpointer(o.dir, o.sync, o.segmentBytes, state.addresses, segments, replayed, hooks.step)
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
    const io = (e: unknown, what: string): DeliveryLogError =>
      new DeliveryLogError({
        reason: "io",
        message: `Could not ${what}: ${describeFsError(e)}`,
        path: fsErrorPath(e) ?? o.dir
      })
    try {
      makeDirectory(o.dir, DIR_MODE)
    } catch (e) {
      throw io(e, "create the log directory")
    }
    let lock: ReturnType<typeof acquireLock>
    try {
      lock = heldLock !== undefined ? { _tag: "Acquired", path: heldLock } : acquireLock(o.dir)
    } catch (e) {
      throw e instanceof DeliveryLogError ? e : io(e, "take the log's lock")
    }
    if (lock._tag === "Held") {
      throw new DeliveryLogError({
        reason: "locked",
        message: `The delivery log is open in process ${
          lock.pid ?? "(unknown)"
        }; close it there first (only one process may write a log directory)`,
        path: lock.path
      })
    }
    try {
      const r = recover(o.dir, o.maxRecordBytes + READ_SLACK, undefined, hooks.digest)
      finishRecovery(o.dir, r, o.sync)
      const segments = new Map<number, KeptSegment>()
      for (const s of r.segments) segments.set(s.number, s)
      let active: ActiveSegment
      if (r.active !== undefined) {
        const fd = fs.openSync(join(o.dir, segmentName(r.active.number, "log")), "r+")
        // Recovery cut the file to its records (a zero-filled tail included).
        active = { number: r.active.number, fd, size: r.active.bytes, length: fs.fstatSync(fd).size }
      } else {
        const number = r.highestNumber + 1
        active = { number, fd: createSegment(o.dir, number, o.sync).fd, size: 0, length: 0 }
        segments.set(number, { number, kind: "log", bytes: 0, crc: 0, crcTo: 0 })
        r.state.addresses.add(fileCode(number, "log"), r.nextAddress)
      }
      let core: LogCore | undefined
      const writer = new GroupCommitWriter(o.dir, active, o.segmentBytes, o.sync, {
        onRoll: (n) => core?.rolled(n),
        onWritten: (n, b) => core?.written(n, b),
        onFailed: (e) => core?.onFailed(ioError(o.dir, e))
      })
      core = new LogCore(
        o,
        lock.path,
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
      const notes: OpenNotes = {
        // Zero-filled space the writer had not reached is no torn write: cut without a note.
        ...(r.truncate !== undefined && r.truncate.zeros !== true
          ? { truncated: { path: r.truncate.path, offset: r.truncate.offset, why: r.truncate.why } }
          : {}),
        ...(lock.tookOverFrom !== undefined ? { tookOverLockFrom: lock.tookOverFrom } : {}),
        ...(r.noManifest ? { wroteManifest: true } : {}),
        ...(r.fromCheckpoint ? { fromCheckpoint: true } : {})
      }
      return { core, notes }
    } catch (e) {
      if (heldLock === undefined) releaseLock(lock.path)
      if (e instanceof DeliveryLogError) throw e
      if (e instanceof CorruptLog) {
        throw new DeliveryLogError({
          reason: "corrupt",
          message:
            `The delivery log is corrupt: ${e.message}; nothing was changed on disk (restore the file from a backup, or move it away to start without it)`,
          path: e.path
        })
      }
      throw io(e, "recover the log")
    }
  }

  private rolled(number: number): void {
    this.segments.set(number, { number, kind: "log", bytes: 0, crc: 0, crcTo: 0 })
    // Before the first record goes there (a throw fails the writer): the sealed size and the new segment are on record.
    this.saveManifest()
  }

  /** A snapshot a compaction is installing (named in the MANIFEST before its rename). */
  private installing: number | null = null

  /** Write the MANIFEST: the snapshot in force, and every `.log` after it with its size now. Throws the I/O error. */
  private saveManifest(): void {
    let snapshot: number | null = null
    const logs: Array<{ number: number; bytes: number }> = []
    for (const s of this.segments.values()) {
      if (s.kind === "snap") snapshot = s.number
      else logs.push({ number: s.number, bytes: s.bytes })
    }
    logs.sort((a, b) => a.number - b.number)
    writeManifest(this.o.dir, { snapshot, next: this.installing, segments: logs }, this.o.sync)
  }

  private written(number: number, bytes: number): void {
    const s = this.segments.get(number)
    this.places.written(number, s?.bytes ?? 0, bytes)
    if (s !== undefined) s.bytes += bytes
    this.totalBytes += bytes
    // Dead weight is an estimate (live bytes are counted by append size); requiring the log to have
    // grown by the last snapshot's size as well makes compaction amortised even when it is off.
    const grown = this.totalBytes - this.baseline
    const deadWeight = this.totalBytes - this.state.liveBytes
    if (
      !this.compacting &&
      this.segments.size >= 2 &&
      grown >= this.o.segmentBytes &&
      grown >= this.baseline &&
      deadWeight >= this.o.segmentBytes &&
      deadWeight > this.state.liveBytes
    ) {
      this.onCompactionWanted()
    }
    this.checkpoints.written(bytes, this.compacting, this.captureAt, this.markAll)
  }

  /** The log now, for a running checkpoint: the state is exactly the records staged before `end`. */
  private readonly captureAt = () => ({
    state: this.state,
    nextLsn: this.nextLsn,
    end: this.places.addressOf(this.writer.taken, this.writer.staging)
  })

  private readonly markAll = (done: (error: Error | undefined) => void): void => this.writer.mark(done)

  /** The reason every call fails now, if any. */
  private refuse(): DeliveryLogError | undefined {
    if (this.closed) return closedError()
    const f = this.writer.failed
    return f === undefined ? undefined : ioError(this.o.dir, f)
  }

  /** Stage an id-keyed record (see `stageIdRecord`), taking the next lsn if it was staged. */
  private frameId(
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

  /** Complete `done` once everything queued so far is durable. */
  private afterDurable<A>(value: () => A, done: Done<A>): void {
    this.writer.mark((err) => (err ? done(ioError(this.o.dir, err)) : done(undefined, value())))
  }

  /** Complete `done` with `value` once the record just staged is durable. */
  private pushed<A>(value: A, done: Done<A>): void {
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
    t.data.committed = true
    t.done(undefined, t.entry, t.arg)
  }

  /**
   * Append `m`: `done(error, entry, arg)` once its record is durable (or at once with why not). One
   * `done` may serve every call, `arg` telling them apart: nothing is allocated per call to complete it.
   */
  append<X>(m: OutboundMessage, now: number, done: AppendDone<X>, arg: X): void {
    const no = this.refuse()
    if (no) return done(no, undefined, arg)
    // The plain path checks, copies and encodes in one walk; anything else (and every error) goes
    // through `checkMessage`, which encodes with JSON.stringify (the same bytes) or says what is wrong.
    const enc = this.messageBytes
    let copy = enc.encode(m, this.o.maxRecordBytes)
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
    writeUuid(buf, idAt)
    const id = textOf(buf, idAt, idAt + UUID_CHARS, true)
    const textAt = writeAppendFields(buf, idAt + UUID_CHARS, seq, now, key, keyBytes)
    let text: string
    if (json === undefined) text = enc.copyText(buf, textAt)
    else {
      buf.write(json, textAt, textBytes, "utf8")
      text = json
    }
    seal(buf, at, this.nextLsn++, Kind.append, payloadBytes)
    const data = new EntryData(
      id,
      seq,
      now,
      key,
      text,
      0,
      undefined,
      undefined,
      "pending",
      false,
      HEADER_BYTES + payloadBytes
    )
    if (key !== undefined) data.pos = pos
    state.insertNew(data)
    this.uncommitted++
    // Nobody knows the id before this call returns, so the entry cannot change before it is durable: it is
    // made now. The copy made while checking the body is the message as replay will parse it from the record.
    this.inflight.push(data, copy === undefined ? data.toEntry() : data.toEntry(copy), done, arg)
    this.writer.push(this.appendDurable)
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
    const no = this.refuse()
    if (no) return done(no)
    if (failure === null || typeof failure !== "object" || typeof failure.error !== "string") {
      return done(
        new DeliveryLogError({
          reason: "invalid",
          message: `Expected \`error\` to be a string, got \`${typeof failure?.error}\``
        })
      )
    }
    if (typeof failure.nextAttemptAt !== "number" || !Number.isFinite(failure.nextAttemptAt)) {
      return done(
        new DeliveryLogError({
          reason: "invalid",
          message: `Expected \`nextAttemptAt\` to be an epoch-ms number, got \`${String(failure.nextAttemptAt)}\``
        })
      )
    }
    const live = this.state.live.get(id)
    if (live === undefined) return done(unknownId(String(id)))
    if (live.status === "dead") {
      return done(
        new DeliveryLogError({
          reason: "invalid",
          message: `Expected a pending entry, got dead entry \`${id}\`; requeue it before recording an attempt`
        })
      )
    }
    const attempts = live.attempts + 1
    const lastError = clipError(failure.error)
    const next = failure.nextAttemptAt
    const dead = failure.dead === true
    const no2 = this.frameId(dead ? Kind.attemptDead : Kind.attempt, id, 12, lastError, "the attempt", (b, at) => {
      b.writeUInt32BE(attempts, at)
      b.writeDoubleBE(next, at + 4)
    })
    if (no2) return done(no2)
    this.state.applyAttempt(id, attempts, lastError, next)
    if (dead) this.state.applyDead(id, lastError)
    // The entry as of this attempt (a later call may change it before this one is durable).
    this.pushed(live.toEntry(), done)
  }

  ack(id: string, now: number, done: Done<void>): void {
    const no = this.refuse()
    if (no) return done(no)
    this.lastNow = now
    this.evictAt(now)
    const live = this.state.live.get(id)
    if (live?.status === "dead") {
      return done(
        new DeliveryLogError({
          reason: "not-pending",
          message:
            `Expected a pending entry to ack, got dead entry \`${id}\`; it stays in the dead letters (requeue it to deliver it again)`
        })
      )
    }
    if (live === undefined) {
      // Acked already (within the window): idempotent, once that ack is durable.
      if (this.state.acked.has(id)) return this.afterDurable(() => undefined, done)
      return done(unknownId(String(id)))
    }
    const no2 = this.frameId(Kind.ack, id, 8, undefined, "the ack", (b, at) => b.writeDoubleBE(now, at))
    if (no2) return done(no2)
    this.state.applyAck(id, now)
    this.pushed(undefined, done)
  }

  deadLetter(id: string, reason: string, done: Done<void>): void {
    const no = this.refuse()
    if (no) return done(no)
    if (typeof reason !== "string") {
      return done(
        new DeliveryLogError({
          reason: "invalid",
          message: `Expected \`reason\` to be a string, got \`${typeof reason}\``
        })
      )
    }
    const live = this.state.live.get(id)
    if (live === undefined) return done(unknownId(String(id)))
    if (live.status === "dead") return this.afterDurable(() => undefined, done)
    const clipped = clipError(reason)
    const no2 = this.frameId(Kind.dead, id, 0, clipped, "the dead-letter reason")
    if (no2) return done(no2)
    this.state.applyDead(id, clipped)
    this.pushed(undefined, done)
  }

  requeue(id: string, done: Done<void>): void {
    const no = this.refuse()
    if (no) return done(no)
    const live = this.state.live.get(id)
    if (live === undefined) return done(unknownId(String(id)))
    if (live.status === "pending") return this.afterDurable(() => undefined, done)
    const no2 = this.frameId(Kind.requeue, id, 0, undefined, "the requeue")
    if (no2) return done(no2)
    this.state.applyRequeue(id)
    this.pushed(undefined, done)
  }

  markStarted(id: string, done: Done<void>): void {
    const no = this.refuse()
    if (no) return done(no)
    const live = this.state.live.get(id)
    if (live === undefined) return done(unknownId(String(id)))
    if (live.status === "dead") {
      return done(
        new DeliveryLogError({
          reason: "not-pending",
          message: `Expected a pending entry to start an attempt of, got dead entry \`${id}\`; requeue it first`
        })
      )
    }
    // Marked already (a replayed entry whose last attempt has no outcome): the mark holds once durable.
    if (live.started) return this.afterDurable(() => undefined, done)
    const no2 = this.frameId(Kind.started, id, 0, undefined, "the attempt-started mark")
    if (no2) return done(no2)
    this.state.applyStarted(id)
    this.pushed(undefined, done)
  }

  flush(done: Done<void>): void {
    const no = this.refuse()
    if (no) return done(no)
    this.afterDurable(() => undefined, done)
  }

  /** Committed entry `id`, if pending or dead (a fresh object: its message parsed from the log's text). */
  get(id: string): DeliveryEntry | undefined {
    const l = this.state.live.get(id)
    return l !== undefined && l.committed ? l.toEntry() : undefined
  }

  /** Committed entries with `status`, in seq order (fresh objects). */
  list(status: "pending" | "dead"): Array<DeliveryEntry> {
    const out: Array<DeliveryEntry> = []
    for (const l of this.state.live.values()) if (l.committed && l.status === status) out.push(l.toEntry())
    return out
  }

  stats(): { pending: number; dead: number; segments: number; bytes: number } {
    // Appends not yet durable are not listed by `pending`: not counted either.
    return {
      pending: this.state.pending - this.uncommitted,
      dead: this.state.dead,
      segments: this.segments.size,
      bytes: this.totalBytes
    }
  }

  /** Run one compaction after any running one. Rejects with `DeliveryLogError`. */
  compact(): Promise<void> {
    const run = this.compaction.then(() => this.compactOnce())
    this.compaction = run.catch(() => undefined)
    return run
  }

  /**
   * A checkpoint whose snapshot failed: segments below `reserved` are sealed and that number is free.
   * The next try rebuilds the same checkpoint from those files instead of sealing another segment.
   */
  private retry: { readonly reserved: number } | undefined

  /** The state at the end of the sealed files below `reserved`, read back from disk. */
  private rebuild(reserved: number): Captured {
    const r = recover(this.o.dir, this.o.maxRecordBytes + READ_SLACK, reserved, this.hooks.digest)
    r.state.evict(this.lastNow, this.o.dedupeWindowMs)
    return {
      entries: Array.from(r.state.live.values()),
      acked: r.state.acked.copy(),
      nextSeq: r.state.nextSeq,
      nextLsn: r.nextLsn
    }
  }

  private async compactOnce(): Promise<void> {
    const no = this.refuse()
    if (no) throw no
    this.compacting = true
    let reserved = -1
    try {
      // A running checkpoint covers the files this one replaces: let it finish first.
      await this.checkpoints.idle()
      const cp = this.retry !== undefined
        ? { reserved: this.retry.reserved, captured: this.rebuild(this.retry.reserved) }
        : await this.writer.requestCheckpoint((): Captured => {
          this.state.evict(this.lastNow, this.o.dedupeWindowMs)
          return {
            entries: Array.from(this.state.live.values(), (l) => l.clone()),
            acked: this.state.acked.copy(),
            nextSeq: this.state.nextSeq,
            nextLsn: this.nextLsn
          }
        })
      reserved = cp.reserved
      this.retry = { reserved }
      this.hooks.step?.("checkpointed")
      const snap = await writeSnapshot(this.o, READ_SLACK, cp.reserved, cp.captured, this.hooks, () => {
        this.installing = cp.reserved
        this.saveManifest()
      })
      const size = snap.size
      const gone = [...this.segments.values()].filter((s) => s.number < cp.reserved)
      this.places.installed(this.state, cp.reserved, cp.captured, snap, gone)
      this.checkpoints.replaced()
      const replaced: Array<string> = []
      for (const s of gone) {
        replaced.push(segmentName(s.number, s.kind))
        this.segments.delete(s.number)
        this.totalBytes -= s.bytes
      }
      this.segments.set(cp.reserved, { number: cp.reserved, kind: "snap", bytes: size, crc: snap.crc, crcTo: size })
      this.totalBytes += size
      this.baseline = size
      this.retry = undefined
      this.installing = null
      this.saveManifest()
      removeReplaced(this.o.dir, replaced, this.o.sync, this.hooks)
    } catch (e) {
      if (reserved >= 0) {
        try {
          fs.rmSync(join(this.o.dir, `${segmentName(reserved, "snap")}.tmp`), { force: true })
        } catch {
          // Left for recovery (it deletes `.snap.tmp` files) or the next try (it truncates it).
        }
      }
      if (e instanceof CorruptLog) {
        this.retry = undefined
        throw new DeliveryLogError({
          reason: "corrupt",
          message: `Compaction found the log corrupt: ${e.message}`,
          path: e.path
        })
      }
      if (e instanceof DeliveryLogError) throw e
      throw new DeliveryLogError({
        reason: "io",
        message: `Compaction failed (${
          (e as NodeJS.ErrnoException)?.code ?? String(e)
        }); the log keeps its segments as they were and goes on`,
        path: this.o.dir
      })
    } finally {
      this.compacting = false
    }
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
        await this.compaction
        await this.writer.close()
        if (this.writer.failed !== undefined) this.cutToFrontier()
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
          try {
            this.checkpoints.atClose(this.state, this.nextLsn)
          } catch {
            // No checkpoint (a full disk, say): the next open replays the records instead.
            try {
              fs.rmSync(join(this.o.dir, `${CHECKPOINT}.tmp`), { force: true })
            } catch {
              // left for the next open, which deletes it
            }
          }
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

  private cutToFrontier(): void {
    const f = this.writer.frontier
    const path = join(this.o.dir, segmentName(f.number, "log"))
    try {
      if (fs.statSync(path).size <= f.size) return
      const fd = fs.openSync(path, "r+")
      try {
        fs.ftruncateSync(fd, f.size)
        if (this.o.sync) fs.fsyncSync(fd)
      } finally {
        fs.closeSync(fd)
      }
    } catch {
      // Recovery on the re-open judges what is there (a torn tail it cuts itself).
    }
  }
}
