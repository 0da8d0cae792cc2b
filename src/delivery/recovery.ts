/**
 * Recovery on open: replay the newest snapshot and every log segment after it, tell a torn tail from
 * corruption, and plan (but not perform) the changes that finish recovery. Nothing on disk is touched
 * until the whole directory has been read and found sound; corruption throws `CorruptLog`.
 */
import * as fs from "node:fs"
import { join } from "node:path"
import { MANIFEST, readManifest } from "./manifest.js"
import {
  BadPayload,
  readAck,
  readAcked,
  readAppend,
  readAttempt,
  readDead,
  readEntry,
  readIdOnly,
  readRequeue
} from "./payload.js"
import { type Decoded, describeInvalid, Kind } from "./record.js"
import { fsyncDir, listSegments, type SegmentFile, segmentName, SegmentReader } from "./segment.js"
import { LogState, type SnapshotBeginPayload, type SnapshotEndPayload } from "./state.js"

/** The log is damaged at `path`, `offset`: open must refuse and change nothing. */
export class CorruptLog extends Error {
  constructor(
    readonly path: string,
    readonly offset: number,
    detail: string
  ) {
    super(`${detail} in ${path} at offset ${offset}`)
  }
}

/** A file the log keeps, with its size. */
export interface KeptSegment {
  readonly number: number
  readonly kind: "log" | "snap"
  bytes: number
}

/** What replay found and what must be done to finish recovery. */
export interface Recovered {
  readonly state: LogState
  readonly nextLsn: number
  readonly segments: Array<KeptSegment>
  /** The `.log` segment to append to (the last one), if there is one after the newest snapshot. */
  readonly active: KeptSegment | undefined
  readonly highestNumber: number
  readonly truncate: { readonly path: string; readonly offset: number; readonly why: string } | undefined
  /** File names to delete: segments superseded by the newest snapshot, and temporary files. */
  readonly remove: ReadonlyArray<string>
  /** The directory held segments but no MANIFEST (an older version wrote it): open writes one. */
  readonly noManifest: boolean
}

/** Check the files against the MANIFEST (what must exist, at least how long); throws `CorruptLog`. */
const checkManifest = (dir: string, files: ReadonlyArray<SegmentFile>, snapAt: number): boolean => {
  const m = readManifest(dir)
  if (typeof m === "string") throw new CorruptLog(join(dir, MANIFEST), 0, m)
  if (m === undefined) return files.length > 0
  const named = [m.snapshot, m.next].filter((n): n is number => n !== null)
  if (snapAt >= 0 && !named.includes(snapAt)) {
    throw new CorruptLog(
      join(dir, segmentName(snapAt, "snap")),
      0,
      `a snapshot the MANIFEST does not name (it names ${
        m.snapshot === null ? "no snapshot" : segmentName(m.snapshot, "snap")
      }): a stale or copied file`
    )
  }
  if (m.snapshot !== null && snapAt < m.snapshot) {
    throw new CorruptLog(join(dir, segmentName(m.snapshot, "snap")), 0, "a missing snapshot (the MANIFEST names it)")
  }
  const logs = new Set<number>()
  let last = -1
  for (const f of files) {
    if (f.kind !== "log") continue
    logs.add(f.number)
    last = f.number
  }
  for (const s of m.segments) {
    if (s.number < snapAt) continue
    const path = join(dir, segmentName(s.number, "log"))
    if (!logs.has(s.number)) throw new CorruptLog(path, 0, "a missing segment (the MANIFEST lists it)")
    const size = fs.statSync(path).size
    // The last segment may have lost a torn tail (judged record by record), never all it had on record;
    // any other segment was sealed at its recorded size.
    if (size < s.bytes && (s.number !== last || size === 0)) {
      throw new CorruptLog(
        path,
        size,
        `a segment cut short: it ends at ${size} bytes, the MANIFEST recorded ${s.bytes} bytes written`
      )
    }
  }
  return false
}

/** The JSON payload of a snapshot's begin or end record. */
const parseJson = (d: Decoded, path: string, offset: number): any => {
  try {
    return JSON.parse(d.buf.toString("utf8", d.start, d.end))
  } catch {
    throw new CorruptLog(path, offset, "a record whose payload is not JSON (its CRC-32 is valid)")
  }
}

const badPayload = (e: unknown, path: string, offset: number): never => {
  if (e instanceof BadPayload) {
    throw new CorruptLog(path, offset, `a record whose payload does not decode (${e.message}; its CRC-32 is valid)`)
  }
  throw e
}

const applyLogRecord = (state: LogState, d: Decoded, path: string, offset: number): void => {
  const { buf, start, end } = d
  try {
    switch (d.kind) {
      case Kind.append: {
        const e = readAppend(buf, start, end)
        e.bytes = d.bytes
        state.insert(e)
        return
      }
      case Kind.attempt:
      case Kind.attemptDead: {
        const a = readAttempt(buf, start, end)
        state.applyAttempt(a.id, a.attempts, a.lastError, a.nextAttemptAt)
        if (d.kind === Kind.attemptDead) state.applyDead(a.id, a.lastError)
        return
      }
      case Kind.ack: {
        const a = readAck(buf, start, end)
        state.applyAck(a.id, a.at)
        return
      }
      case Kind.dead: {
        const a = readDead(buf, start, end)
        state.applyDead(a.id, a.reason)
        return
      }
      case Kind.requeue:
        state.applyRequeue(readRequeue(buf, start, end))
        return
      case Kind.started:
        state.applyStarted(readIdOnly(buf, start, end, "started"))
        return
    }
  } catch (e) {
    badPayload(e, path, offset)
  }
  throw new CorruptLog(path, offset, `a snapshot record (kind ${d.kind}) in a log segment`)
}

const withFile = <A>(path: string, f: (fd: number, size: number) => A): A => {
  const fd = fs.openSync(path, "r")
  try {
    return f(fd, fs.fstatSync(fd).size)
  } finally {
    fs.closeSync(fd)
  }
}

/** Replay a snapshot: strict, it was complete and synced before it got its name. Returns the next lsn. */
const replaySnapshot = (state: LogState, path: string, maxPayload: number): { nextLsn: number; size: number } =>
  withFile(path, (fd, size) => {
    const reader = new SegmentReader(fd, size, maxPayload)
    let lsn = 0
    let begin: SnapshotBeginPayload | undefined
    for (;;) {
      const at = reader.offset
      const r = reader.next()
      if (r === undefined) throw new CorruptLog(path, at, "a snapshot without its end record")
      if (typeof r === "string") throw new CorruptLog(path, at, describeInvalid(r))
      if (r.lsn !== lsn + 1) throw new CorruptLog(path, at, `record number ${r.lsn} where ${lsn + 1} was expected`)
      lsn = r.lsn
      if (begin === undefined) {
        if (r.kind !== Kind.snapshotBegin) {
          throw new CorruptLog(path, at, "a snapshot not starting with its begin record")
        }
        begin = parseJson(r, path, at) as SnapshotBeginPayload
        continue
      }
      if (r.kind === Kind.snapshotEntry) {
        try {
          const e = readEntry(r.buf, r.start, r.end)
          e.bytes = r.bytes
          state.insert(e)
        } catch (e) {
          badPayload(e, path, at)
        }
      } else if (r.kind === Kind.snapshotAcked) {
        try {
          const a = readAcked(r.buf, r.start, r.end)
          state.applyAcked(a.id, a.at, a.entry, r.bytes)
        } catch (e) {
          badPayload(e, path, at)
        }
      } else if (r.kind === Kind.snapshotEnd) {
        if ((parseJson(r, path, at) as SnapshotEndPayload).records !== lsn) {
          throw new CorruptLog(path, at, "a snapshot end record with a wrong count")
        }
        if (reader.offset !== size) throw new CorruptLog(path, reader.offset, "bytes after a snapshot's end record")
        if (begin.nextSeq > state.nextSeq) state.nextSeq = begin.nextSeq
        return { nextLsn: begin.nextLsn, size }
      } else throw new CorruptLog(path, at, `a log record (kind ${r.kind}) inside a snapshot`)
    }
  })

/**
 * Read `dir` and rebuild the state. `maxPayload` bounds every record length read. Throws `CorruptLog`
 * on corruption, and the I/O error itself when a read fails.
 */
export const recover = (dir: string, maxPayload: number, below?: number): Recovered => {
  const listed = listSegments(dir)
  const temps = below === undefined ? listed.temps : []
  // `below`: only the sealed files numbered below it (a compaction retry rebuilding its checkpoint); no torn tail there.
  const files = below === undefined ? listed.segments : listed.segments.filter((f) => f.number < below)
  const state = new LogState()
  let snapAt = -1
  for (const f of files) if (f.kind === "snap") snapAt = f.number
  const noManifest = below === undefined ? checkManifest(dir, files, snapAt) : false
  const remove: Array<string> = [...temps]
  const kept: Array<KeptSegment> = []
  let expected = 1
  if (snapAt >= 0) {
    const name = files.find((f) => f.number === snapAt)!.name
    const r = replaySnapshot(state, join(dir, name), maxPayload)
    expected = r.nextLsn
    kept.push({ number: snapAt, kind: "snap", bytes: r.size })
  }
  const logs: Array<SegmentFile> = []
  for (const f of files) {
    if (f.number < snapAt) remove.push(f.name)
    else if (f.kind === "log") logs.push(f)
  }
  let truncate: Recovered["truncate"] = undefined
  logs.forEach((f, i) => {
    const path = join(dir, f.name)
    const last = i === logs.length - 1 && below === undefined
    const size = withFile(path, (fd, size) => {
      const reader = new SegmentReader(fd, size, maxPayload)
      for (;;) {
        const at = reader.offset
        const r = reader.next()
        if (r === undefined) return size
        if (typeof r === "string") {
          // A torn write leaves a prefix: a cut record, or one failing its CRC. A length over the limit
          // is never that (unless the limit was lowered since), so it is corruption wherever it is.
          // An unknown kind passed its CRC: written whole (by a newer version?), not torn either.
          if (last && r !== "too-long" && r !== "bad-kind" && !reader.anyValidAfter(at, expected - 1)) {
            truncate = { path, offset: at, why: describeInvalid(r) }
            return at
          }
          throw new CorruptLog(path, at, describeInvalid(r))
        }
        if (r.lsn !== expected) {
          throw new CorruptLog(
            path,
            at,
            `record number ${r.lsn} where ${expected} was expected (a segment is missing or misplaced)`
          )
        }
        applyLogRecord(state, r, path, at)
        expected++
      }
    })
    kept.push({ number: f.number, kind: "log", bytes: size })
  })
  const lastKept = kept[kept.length - 1]
  return {
    state,
    nextLsn: expected,
    segments: kept,
    active: lastKept !== undefined && lastKept.kind === "log" ? lastKept : undefined,
    highestNumber: files.length === 0 ? 0 : files[files.length - 1]!.number,
    truncate,
    remove,
    noManifest
  }
}

/** Perform what `recover` planned: cut the torn tail and delete superseded and temporary files. */
export const finishRecovery = (dir: string, r: Recovered, sync: boolean): void => {
  if (r.truncate !== undefined) {
    const fd = fs.openSync(r.truncate.path, "r+")
    try {
      fs.ftruncateSync(fd, r.truncate.offset)
      if (sync) fs.fsyncSync(fd)
    } finally {
      fs.closeSync(fd)
    }
  }
  for (const name of r.remove) fs.rmSync(join(dir, name), { force: true })
  if (sync && r.remove.length > 0) fsyncDir(dir)
}
