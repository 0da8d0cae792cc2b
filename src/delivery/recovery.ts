/**
 * Recovery on open: replay the newest snapshot and every log segment after it, tell a torn tail from
 * corruption, and plan (but not perform) the changes that finish recovery. Nothing on disk is touched
 * until the whole directory has been read and found sound; corruption throws `CorruptLog`.
 */
import * as fs from "node:fs"
import { join } from "node:path"
import type { CheckpointState } from "./checkpoint.js"
import { readCheckpoint } from "./checkpointRead.js"
import { CorruptLog } from "./corrupt.js"
import type { EntryData } from "./entryData.js"
import type { KeyDigest } from "./keyDigest.js"
import { MANIFEST, readManifest } from "./manifest.js"
import { RecordReader } from "./recordReader.js"
import { replayLog, replaySnapshot, type Truncate, withFile } from "./replay.js"
import { checksumFile, fileCode, fsyncDir, listSegments, ReadWindow, type SegmentFile, segmentName } from "./segment.js"
import { LogState } from "./state.js"

export { CorruptLog } from "./corrupt.js"

/** A file the log keeps, with its size, and the CRC-32 of its first `crcTo` bytes (for a checkpoint). */
export interface KeptSegment {
  readonly number: number
  readonly kind: "log" | "snap"
  bytes: number
  crc: number
  crcTo: number
}

/** What replay found and what must be done to finish recovery. */
export interface Recovered {
  readonly state: LogState
  readonly nextLsn: number
  readonly segments: Array<KeptSegment>
  /** The `.log` segment to append to (the last one), if there is one after the newest snapshot. */
  readonly active: KeptSegment | undefined
  readonly highestNumber: number
  /** The last segment's tail to cut: a torn write, or zero-filled space (`zeros`). */
  readonly truncate: Truncate | undefined
  /** File names to delete: segments superseded by the newest snapshot, and temporary files. */
  readonly remove: ReadonlyArray<string>
  /** The directory held segments but no MANIFEST (an older version wrote it): open writes one. */
  readonly noManifest: boolean
  /** The address after the last kept file's bytes (the writer's records follow: addresses.ts). */
  readonly nextAddress: number
  /** Open started from the CHECKPOINT (it matched every file it covers). */
  readonly fromCheckpoint: boolean
  /** Bytes replayed (those a checkpoint did not cover). */
  readonly replayed: number
}

/**
 * Check the files against the MANIFEST (what must exist, at least how long); throws `CorruptLog`.
 * Returns whether there was none (with segments), and the bytes it records for each `.log`.
 */
const checkManifest = (
  dir: string,
  files: ReadonlyArray<SegmentFile>,
  snapAt: number
): { readonly noManifest: boolean; readonly recorded: ReadonlyMap<number, number> } => {
  const recorded = new Map<number, number>()
  const m = readManifest(dir)
  if (typeof m === "string") throw new CorruptLog(join(dir, MANIFEST), 0, m)
  if (m === undefined) return { noManifest: files.length > 0, recorded }
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
    recorded.set(s.number, s.bytes)
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
  return { noManifest: false, recorded }
}

/** How far a checkpoint carried recovery: its first `files` files, the last of them up to `lastSize`. */
interface Resumed {
  readonly files: number
  readonly lastSize: number
  readonly crcs: ReadonlyArray<number>
  readonly nextLsn: number
}

/** An entry by place is not where its checkpoint says. */
class Unplaced extends Error {}

/** Bytes the reader of entries by place reads at a time: they are in file order, mostly next to each other. */
const PLACED_WINDOW = 1 << 20

/**
 * The checkpoint's live entries, those by place read from their records in the files it covers
 * (checked as recovery checks a record, and holding the id the checkpoint names), with the state the
 * checkpoint gives them; `undefined` if one is not there (the checkpoint does not stand for these files).
 */
const liveOf = (dir: string, ck: CheckpointState, maxPayload: number): Array<EntryData> | undefined => {
  const covered = new Map(ck.files.map((f) => [fileCode(f.number, f.kind), f.size]))
  let reader: RecordReader | undefined
  try {
    return ck.live.map(({ code, entry, offset, placed }) => {
      if (entry !== undefined) return entry
      const size = covered.get(code)
      if (placed === undefined || size === undefined || offset >= size) throw new Unplaced()
      const e = (reader ??= new RecordReader(dir, maxPayload, PLACED_WINDOW, true)).entryAt(code, offset)
      if (e.id !== placed.id) throw new Unplaced()
      e.status = placed.status
      e.started = placed.started
      e.attempts = placed.attempts
      e.nextAttemptAt = placed.nextAttemptAt
      e.lastError = placed.lastError
      e.bytes = placed.bytes
      return e
    })
  } catch (e) {
    // The files hash as the checkpoint says, so a record not found where it points is the checkpoint's fault.
    if (e instanceof Unplaced || e instanceof CorruptLog) return undefined
    throw e
  } finally {
    reader?.close()
  }
}

/**
 * Start `state` from the CHECKPOINT of `dir` if every file it covers is the next of `order` and its
 * covered bytes still hash as recorded (otherwise: `undefined`, and nothing in `state` changed).
 */
const fromCheckpoint = (
  dir: string,
  order: ReadonlyArray<SegmentFile>,
  sizes: ReadonlyArray<number>,
  state: LogState,
  window: ReadWindow,
  maxPayload: number
): Resumed | undefined => {
  const ck = readCheckpoint(dir)
  if (ck === undefined) return undefined
  const n = ck.files.length
  if (n === 0 || n > order.length) return undefined
  for (let i = 0; i < n; i++) {
    const f = ck.files[i]!
    const o = order[i]!
    if (f.number !== o.number || f.kind !== o.kind) return undefined
    // Files before the last covered one were sealed; the last may have grown since.
    if (i < n - 1 ? sizes[i] !== f.size : sizes[i]! < f.size) return undefined
  }
  for (let i = 0; i < n; i++) {
    const f = ck.files[i]!
    if (withFile(join(dir, order[i]!.name), (fd) => checksumFile(fd, f.size, 0, 0, window)) !== f.crc) return undefined
  }
  const live = liveOf(dir, ck, maxPayload)
  if (live === undefined) return undefined
  state.acked.restore(ck.acked)
  for (const [id, , entry] of ck.acked.kept) {
    if (entry?.key !== undefined) state.keys.set(entry.key, id)
    if (entry !== undefined && entry.seq >= state.nextSeq) state.nextSeq = entry.seq + 1
  }
  ck.live.forEach(({ code, offset }, i) => {
    const entry = live[i]!
    entry.pos = code < 0 ? -1 : state.addresses.addressOf(code, offset)
    state.insert(entry)
  })
  if (ck.nextSeq > state.nextSeq) state.nextSeq = ck.nextSeq
  state.liveBytes = ck.liveBytes
  return { files: n, lastSize: ck.files[n - 1]!.size, crcs: ck.files.map((f) => f.crc), nextLsn: ck.nextLsn }
}

/**
 * Read `dir` and rebuild the state. `maxPayload` bounds every record length read. Throws `CorruptLog`
 * on corruption, and the I/O error itself when a read fails. A CHECKPOINT that matches the files
 * stands for the bytes it covers (their CRC-32 checked); what follows them is replayed.
 */
export const recover = (dir: string, maxPayload: number, below?: number, digest?: KeyDigest): Recovered => {
  const listed = listSegments(dir)
  const temps = below === undefined ? listed.temps : []
  // `below`: only the sealed files numbered below it (a compaction retry rebuilding its checkpoint); no torn tail there.
  const files = below === undefined ? listed.segments : listed.segments.filter((f) => f.number < below)
  const state = new LogState(digest)
  let snapAt = -1
  for (const f of files) if (f.kind === "snap") snapAt = f.number
  const { noManifest, recorded } = below === undefined
    ? checkManifest(dir, files, snapAt)
    : { noManifest: false, recorded: new Map<number, number>() }
  const remove: Array<string> = [...temps]
  /** The snapshot in force, then every `.log` after it. */
  const order: Array<SegmentFile> = []
  for (const f of files) {
    if (f.number < snapAt) remove.push(f.name)
    else if (f.kind === "log" || f.number === snapAt) order.push(f)
  }
  // Every file gets its own range of addresses, side by side in order.
  const sizes = order.map((f) => fs.statSync(join(dir, f.name)).size)
  const bases: Array<number> = []
  let base = 0
  order.forEach((f, i) => {
    bases.push(base)
    state.addresses.add(fileCode(f.number, f.kind), base)
    base += sizes[i]!
  })
  // One read buffer for every file of this pass (segment.ts, `ReadWindow`).
  const window = new ReadWindow()
  const resumed = below === undefined ? fromCheckpoint(dir, order, sizes, state, window, maxPayload) : undefined
  const kept: Array<KeptSegment> = []
  let expected = 1
  let truncate: Recovered["truncate"] = undefined
  let replayed = 0
  order.forEach((f, i) => {
    const path = join(dir, f.name)
    const keep = (bytes: number, crc: number): void => {
      kept.push({ number: f.number, kind: f.kind, bytes, crc, crcTo: bytes })
    }
    if (resumed !== undefined && i < resumed.files) {
      expected = resumed.nextLsn
      if (i < resumed.files - 1 || f.kind === "snap") return keep(sizes[i]!, resumed.crcs[i]!)
    }
    if (f.kind === "snap") {
      const r = replaySnapshot(state, path, fileCode(f.number, "snap"), bases[i]!, maxPayload, window)
      replayed += r.size
      expected = r.nextLsn
      return keep(r.size, r.crc)
    }
    const from = resumed !== undefined && i === resumed.files - 1
      ? { offset: resumed.lastSize, crc: resumed.crcs[i]!, expected }
      : { offset: 0, crc: 0, expected }
    const last = i === order.length - 1 && below === undefined
    const r = replayLog(state, path, bases[i]!, from, last, maxPayload, window)
    expected = r.expected
    replayed += r.size - from.offset
    if (r.truncate?.zeros === true && r.size === 0 && (recorded.get(f.number) ?? 0) > 0) {
      // As an empty last segment that had records on record: zero-filled space holds none of them.
      throw new CorruptLog(
        path,
        0,
        `a segment cut short: it holds only zeros, the MANIFEST recorded ${recorded.get(f.number)} bytes written`
      )
    }
    if (r.truncate !== undefined) truncate = r.truncate
    keep(r.size, r.crc)
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
    noManifest,
    nextAddress: lastKept === undefined ? 0 : bases[kept.length - 1]! + lastKept.bytes,
    fromCheckpoint: resumed !== undefined,
    replayed
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
