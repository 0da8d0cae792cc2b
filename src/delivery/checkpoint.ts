/**
 * The CHECKPOINT file: the state at a clean close or while the log runs, so that the next open need
 * not replay every record (see docs/delivery-log-format.md, "The checkpoint"). It names every file it
 * covers with its size and the CRC-32 of those bytes; open uses it only when every covered file still
 * hashes to that, and otherwise replays as if it were not there. It is a cache of the log, never part
 * of it: a missing, damaged or stale one costs time, never a record. Writing it: here; reading it:
 * checkpointRead.ts.
 */
import * as fs from "node:fs"
import { endianness } from "node:os"
import { join } from "node:path"
import { crc32 } from "node:zlib"
import type { AckedParts, AckedView } from "./ackedWindow.js"
import type { EntryData } from "./entryData.js"
import { LiveEntries } from "./liveEntries.js"
import {
  ackedBytes,
  entryBytes,
  stateBytes,
  utf8Bytes,
  writeAcked,
  writeEntry,
  writeId,
  writeState,
  writeStateFresh
} from "./payload.js"
import { FILE_MODE } from "./segment.js"

export const CHECKPOINT = "CHECKPOINT"
/**
 * The checkpoint before the newest, kept (as a second name of its file) to be written over by the
 * next one: its pages are in the page cache already, where a new file's are fresh pages for the kernel
 * to find (writing 5 MB into a new file took ~3x the CPU of writing it over an old one on the bench
 * machine). Never read: a leftover costs disk space, not correctness; an older build ignores it.
 */
export const SPARE = "CHECKPOINT.spare"

/**
 * A ring's open-addressing tables are stored only when it holds at least this many ids: fewer are
 * inserted again on restore in well under a millisecond, and the smallest tables (1,024 slots) were
 * ~24 KB of a one-entry log's checkpoint.
 */
export const TABLES_FROM = 1 << 16

/** Points where a test may crash the process while a running checkpoint is written (`hooks.step`). */
export type CheckpointStep = "checkpoint-captured" | "checkpoint-temp-written" | "checkpoint-renamed"

/**
 * Format 3: the rings first (written at capture, straight from their arrays), the header at the end,
 * and a live entry whose record's place is known by that place (`BY_PLACE`) instead of a copy.
 */
export const MAGIC = Buffer.from("SYCKPT03", "latin1")
/** Format 2: the same with every live entry whole; still read. */
export const MAGIC_2 = Buffer.from("SYCKPT02", "latin1")

/**
 * Set in a live entry's payload length (format 3): the payload is the entry's id and delivery state
 * (`idLen u8 | id | status | attempts | nextAttemptAt | errLen | lastError`, as kind 17 has them);
 * its seq, time, key and message are in its record, at the file code and offset given.
 */
export const BY_PLACE = 0x8000_0000

/** Bytes after the header: its length, then the CRC-32 of every byte before the CRC. */
export const TRAILER_BYTES = 8

/** A file the checkpoint covers: its first `size` bytes hash to `crc`. */
export interface Covered {
  readonly number: number
  readonly kind: "log" | "snap"
  readonly size: number
  readonly crc: number
}

/** A live entry by place, as read: its id and delivery state (the rest is in its record). */
export interface PlacedState {
  readonly id: string
  readonly status: "pending" | "dead"
  readonly started: boolean
  readonly attempts: number
  readonly nextAttemptAt: number | undefined
  readonly lastError: string | undefined
  readonly bytes: number
}

/**
 * A live entry and where its record is (file code, offset; code -1: not known): read whole, or
 * (`entry` undefined) by place, to be read from that record with the state of `placed`.
 */
export interface PlacedEntry {
  readonly entry: EntryData | undefined
  readonly placed?: PlacedState
  readonly code: number
  readonly offset: number
}

/** What a checkpoint holds: the state after the covered bytes. */
export interface CheckpointState {
  readonly files: ReadonlyArray<Covered>
  readonly nextLsn: number
  readonly nextSeq: number
  readonly liveBytes: number
  readonly live: ReadonlyArray<PlacedEntry>
  readonly acked: AckedParts
}

/** The JSON header (at the end of the file). */
export interface Header {
  readonly endian: string
  readonly files: ReadonlyArray<Covered>
  readonly nextLsn: number
  readonly nextSeq: number
  readonly liveBytes: number
  readonly live: number
  readonly kept: number
  readonly plain: readonly [count: number, runs: number]
  readonly keyed: readonly [count: number, runs: number]
  /** Cells of the plain ring's id table, the keyed ring's id and digest tables (0: none stored). */
  readonly tables: readonly [number, number, number]
  /** The slot of each ring's oldest id when its tables were written (their slot numbers count from slot 0). */
  readonly heads: readonly [plain: number, keyed: number]
}

export const NONE = 0xffff_ffff

const bytesOf = (a: Uint32Array | Uint8Array | Float64Array | Int32Array): Buffer =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength)

/**
 * A checkpoint whose state is captured: its rings are in `CHECKPOINT.tmp` already (open as `fd`,
 * `at` bytes, hashing to `crc`); the entries (`entries`, serialised when captured: the live state
 * goes on changing) and the header follow once the files it covers are named (`frameCheckpoint`).
 */
export interface CapturedCheckpoint {
  readonly header: Omit<Header, "endian" | "files">
  readonly fd: number
  readonly at: number
  readonly crc: number
  /** Live entries, then kept acked ids. */
  readonly entries: Buffer
  /**
   * The buffer `entries` starts (a view of) at its offset 0: the caller's room (`captureCheckpoint`'s
   * `room`) when they fitted, so that `frameCheckpoint` frames the rest after them in place.
   */
  readonly room: Buffer
  /** Pairs: where a live entry's file code is in `entries` (its offset follows), and the address of its record. */
  readonly places: Float64Array
}

const writeAllSync = (fd: number, buf: Uint8Array, position: number): void => {
  let off = 0
  while (off < buf.length) off += fs.writeSync(fd, buf, off, buf.length - off, position + off)
}

/** Payload bytes of a live entry by place (`BY_PLACE`). */
const placedBytes = (e: EntryData): number => 1 + utf8Bytes(e.id) + stateBytes(e)
/** `placedBytes` of a slot-only entry: a canonical id, a fresh state (no error). */
const PLAIN_PLACED_BYTES = 1 + 36 + 17

/**
 * The live and kept entries, serialised, with the places to fill in once their records' files are
 * known. A live entry whose record's address is known is written by place: its id and state, not
 * its message (a capture of 15k pending entries copied ~4 MB of texts, ~1 µs an entry).
 */
const serialiseEntries = (live: ReadonlyArray<EntryData> | LiveEntries, kept: AckedView["kept"], room?: Buffer) => {
  // The live entries' slots, when given as the table: a slot-only entry is written from its slot (no copy made).
  const table = live instanceof LiveEntries ? live : undefined
  const slots = table?.slots()
  const count = slots !== undefined ? slots.length : (live as ReadonlyArray<EntryData>).length
  /** Entry `k` as an object, or undefined for a slot-only entry (`slots[k]`). */
  const objectAt = (k: number): EntryData | undefined =>
    table === undefined
      ? (live as ReadonlyArray<EntryData>)[k]!
      : table.isObject(slots![k]!)
      ? table.object(slots![k]!)
      : table.posOf(slots![k]!) >= 0
      ? undefined
      : table.copy(slots![k]!)
  let size = 0
  let placed = 0
  for (let k = 0; k < count; k++) {
    const e = objectAt(k)
    if (e === undefined) {
      size += 20 + PLAIN_PLACED_BYTES
      placed++
    } else if (e.pos >= 0) {
      size += 20 + placedBytes(e)
      placed++
    } else size += 20 + entryBytes(e)
  }
  const keptSizes = kept.map(([id, , entry]) => ackedBytes(id, entry))
  for (const n of keptSizes) size += 12 + n
  // Into the caller's room when they fit (a fresh buffer is fresh pages to fault in, ~12 µs each here).
  const whole = room !== undefined && room.length >= size ? room : Buffer.allocUnsafe(size)
  const buf = whole.length === size ? whole : whole.subarray(0, size)
  // Sized once (a growing array of a number pair per pending entry was copied as it grew).
  const places = new Float64Array(2 * placed)
  let p = 0
  let at = 0
  for (let k = 0; k < count; k++) {
    const e = objectAt(k)
    // Its payload's length goes in front once it is written.
    const head = at
    at += 4
    if (e === undefined) {
      // A slot-only entry (liveEntries.ts), by place: its id from its bits, a fresh state but for its flags.
      const slot = slots![k]!
      places[p++] = at
      places[p++] = table!.posOf(slot)
      at = buf.writeUInt32LE(NONE, at)
      at = buf.writeUInt32LE(0, at)
      at = buf.writeDoubleLE(table!.bytesOf(slot), at)
      const from = at
      at = writeStateFresh(buf, table!.writeId(slot, buf, at), table!.isDead(slot), table!.isStarted(slot))
      buf.writeUInt32LE(((at - from) | BY_PLACE) >>> 0, head)
      continue
    }
    if (e.pos >= 0) {
      places[p++] = at
      places[p++] = e.pos
    }
    at = buf.writeUInt32LE(NONE, at)
    at = buf.writeUInt32LE(0, at)
    at = buf.writeDoubleLE(e.bytes, at)
    const from = at
    if (e.pos < 0) at = writeEntry(buf, at, e)
    else at = writeState(buf, writeId(buf, at, e.id, utf8Bytes(e.id)), e)
    buf.writeUInt32LE(e.pos < 0 ? at - from : ((at - from) | BY_PLACE) >>> 0, head)
  }
  kept.forEach(([id, time, entry, bytes], i) => {
    at = buf.writeUInt32LE(keptSizes[i]!, at)
    at = buf.writeDoubleLE(bytes, at)
    at = writeAcked(buf, at, id, time, entry)
  })
  if (at !== size) throw new Error(`checkpoint entries of ${at} bytes where ${size} were counted`)
  return { entries: buf, room: whole, places }
}

/**
 * Capture the state now: its rings written to `CHECKPOINT.tmp` of `dir` straight from their arrays
 * (views, no copy: a copy of a 1M-id window into a new buffer was ~50 MB of fresh pages, ~200 ms of
 * page faults on the machine of bench/README.md), the entries serialised. Throws the I/O error (the
 * temporary file removed).
 */
export const captureCheckpoint = (
  dir: string,
  meta: { readonly nextLsn: number; readonly nextSeq: number; readonly liveBytes: number },
  /** Live entries, in seq order (by place where `pos` is known), or the live entries' table itself. */
  live: ReadonlyArray<EntryData> | LiveEntries,
  acked: AckedView,
  /**
   * A buffer the entries may be serialised into (and the rest framed after them), if they fit: the
   * caller's, not read or written by anything else until the checkpoint is written or dropped.
   */
  room?: Buffer,
  /** A ring's tables are stored when it holds at least this many ids (`TABLES_FROM`; tests: 0). */
  tablesFrom = TABLES_FROM
): CapturedCheckpoint => {
  const { kept, plain, keyed } = acked
  const tables = [
    plain.count >= tablesFrom ? plain.table : undefined,
    keyed.count >= tablesFrom ? keyed.tables[0] : undefined,
    keyed.count >= tablesFrom ? keyed.tables[1] : undefined
  ]
  const fd = openTemp(dir)
  try {
    let at = 0
    let crc = 0
    const put = (a: Uint32Array | Uint8Array | Float64Array | Int32Array): void => {
      // Not an empty one: zlib's crc32 of a NULL buffer (an empty ArrayBuffer's) is 0, not the CRC carried in.
      if (a.byteLength === 0) return
      const b = bytesOf(a)
      crc = crc32(b, crc)
      writeAllSync(fd, b, at)
      at += b.length
    }
    put(MAGIC)
    for (const p of plain.words) put(p)
    for (const column of [keyed.words, keyed.digests, keyed.files, keyed.offsets, keyed.bytes, keyed.flags]) {
      for (const p of column) put(p)
    }
    for (const t of tables) if (t !== undefined) put(t)
    for (const r of [plain.runs, keyed.runs]) {
      put(Float64Array.from(r.at))
      put(Uint32Array.from(r.count))
    }
    const { entries, room: whole, places } = serialiseEntries(live, kept, room)
    return {
      header: {
        nextLsn: meta.nextLsn,
        nextSeq: meta.nextSeq,
        liveBytes: meta.liveBytes,
        live: live instanceof LiveEntries ? live.size : live.length,
        kept: kept.length,
        plain: [plain.count, plain.runs.at.length],
        keyed: [keyed.count, keyed.runs.at.length],
        tables: [tables[0]?.length ?? 0, tables[1]?.length ?? 0, tables[2]?.length ?? 0],
        heads: [plain.head, keyed.head]
      },
      fd,
      at,
      crc,
      entries,
      room: whole,
      places
    }
  } catch (e) {
    dropCheckpoint(dir, fd)
    throw e
  }
}

/**
 * Open `CHECKPOINT.tmp` of `dir` for a new checkpoint: the spare (`SPARE`) renamed, to be written over
 * in place (its length set when the checkpoint is finished: `finishLength`), or a new empty file. A
 * spare that is not the only name of its file (a crash between `keepSpare`'s link and the rename that
 * follows leaves CHECKPOINT and the spare one file) is never written over: that would tear the
 * checkpoint in force.
 */
export const openTemp = (dir: string): number => {
  const temp = join(dir, `${CHECKPOINT}.tmp`)
  try {
    fs.renameSync(join(dir, SPARE), temp)
    const fd = fs.openSync(temp, fs.constants.O_WRONLY)
    if (fs.fstatSync(fd).nlink === 1) return fd
    fs.closeSync(fd)
    fs.rmSync(temp, { force: true })
  } catch {
    // No spare (or it could not be taken): a new file.
  }
  // Exclusive: a name left behind is removed first, never truncated (it could be a second name of the checkpoint in force).
  fs.rmSync(temp, { force: true })
  return fs.openSync(
    temp,
    fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_WRONLY | fs.constants.O_EXCL,
    FILE_MODE
  )
}

/**
 * Before `CHECKPOINT.tmp` is renamed over CHECKPOINT: the file of the checkpoint in force gets the
 * spare's name too, so that the rename leaves it as the spare (`openTemp`). Never throws: without a
 * spare the next checkpoint writes a new file.
 */
export const keepSpare = (dir: string): void => {
  try {
    fs.rmSync(join(dir, SPARE), { force: true })
    fs.linkSync(join(dir, CHECKPOINT), join(dir, SPARE))
  } catch {
    // no checkpoint in force, or links not supported: no spare
  }
}

/**
 * The bytes that finish a captured checkpoint's file, from offset `c.at` (entries, header, trailer):
 * `files` as covered, each live entry's record located by `locate` (an address to file code and
 * offset; not found: code none).
 */
export const frameCheckpoint = (
  c: CapturedCheckpoint,
  files: ReadonlyArray<Covered>,
  locate: (address: number, out: Uint32Array) => boolean
): Buffer => {
  const place = new Uint32Array(2)
  for (let i = 0; i < c.places.length; i += 2) {
    if (!locate(c.places[i + 1]!, place)) continue
    c.entries.writeUInt32LE(place[0]!, c.places[i]!)
    c.entries.writeUInt32LE(place[1]!, c.places[i]! + 4)
  }
  const header: Header = { endian: endianness(), files, ...c.header }
  const json = Buffer.from(JSON.stringify(header))
  const need = c.entries.length + json.length + TRAILER_BYTES
  // After the entries in their room when it has space for the rest (no copy of them), else in a new buffer.
  const inPlace = c.room.length >= need
  const out = inPlace ? c.room.subarray(0, need) : Buffer.allocUnsafe(need)
  if (!inPlace) c.entries.copy(out, 0)
  json.copy(out, c.entries.length)
  const end = out.writeUInt32LE(json.length, c.entries.length + json.length)
  out.writeUInt32LE(crc32(out.subarray(0, end), c.crc), end)
  return out
}

/** Close a captured checkpoint's file and remove it (given up). Never throws. */
export const dropCheckpoint = (dir: string, fd: number): void => {
  try {
    fs.closeSync(fd)
  } catch {
    // closed already
  }
  try {
    fs.rmSync(join(dir, `${CHECKPOINT}.tmp`), { force: true })
  } catch {
    // left for the next open, which deletes it
  }
}

/**
 * Finish a captured checkpoint now (the close's): write `rest` (`frameCheckpoint`), close, rename.
 * No sync: a torn one fails its CRC. Throws the I/O error (the temporary file removed).
 */
export const writeCheckpoint = (dir: string, c: CapturedCheckpoint, rest: Buffer): void => {
  try {
    writeAllSync(c.fd, rest, c.at)
    // A spare written over may have been longer: the file ends where the checkpoint does (its trailer).
    fs.ftruncateSync(c.fd, c.at + rest.length)
  } catch (e) {
    dropCheckpoint(dir, c.fd)
    throw e
  }
  fs.closeSync(c.fd)
  keepSpare(dir)
  fs.renameSync(join(dir, `${CHECKPOINT}.tmp`), join(dir, CHECKPOINT))
}

/** Remove the checkpoint of `dir` (it no longer matches the files). */
export const removeCheckpoint = (dir: string): void => {
  fs.rmSync(join(dir, CHECKPOINT), { force: true })
}
