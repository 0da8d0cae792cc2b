/**
 * Segment files of the delivery log: their names, listing a directory, creating a segment durably,
 * and reading records from one without trusting its lengths.
 */
import * as fs from "node:fs"
import { join } from "node:path"
import { crc32 } from "node:zlib"
import { decodeAt, type Decoded, HEADER_BYTES, type Invalid } from "./record.js"

/** `0000000000000001.log` (records appended by the writer) or `0000000000000007.snap` (a compaction). */
export interface SegmentFile {
  readonly number: number
  readonly kind: "log" | "snap"
  readonly name: string
}

const NAME = /^(\d{16})\.(log|snap)$/
const TMP = /^(\d{16}\.snap|MANIFEST|CHECKPOINT)\.tmp$/

/** The file name of segment `number`. */
export const segmentName = (number: number, kind: "log" | "snap"): string =>
  `${String(number).padStart(16, "0")}.${kind}`

/** The top bit of a file code: a `.snap` (file numbers stay below 2^31). */
export const SNAP_BIT = 0x8000_0000

/** A file as one 32-bit number (the dedupe window keeps where records are as these), or -1 past 2^31 files. */
export const fileCode = (number: number, kind: "log" | "snap"): number =>
  number >= SNAP_BIT ? -1 : kind === "snap" ? (number | SNAP_BIT) >>> 0 : number

/** The file number of a file code. */
export const codeNumber = (code: number): number => code & 0x7fff_ffff

/** The file name of a file code. */
export const codeName = (code: number): string => segmentName(codeNumber(code), code >= SNAP_BIT ? "snap" : "log")

/** Segments of `dir` in number order, and leftover temporary files of an interrupted compaction. */
export const listSegments = (dir: string): { segments: Array<SegmentFile>; temps: Array<string> } => {
  const segments: Array<SegmentFile> = []
  const temps: Array<string> = []
  for (const name of fs.readdirSync(dir)) {
    const m = NAME.exec(name)
    if (m) segments.push({ number: Number(m[1]), kind: m[2] as "log" | "snap", name })
    else if (TMP.test(name)) temps.push(name)
  }
  segments.sort((a, b) => a.number - b.number)
  return { segments, temps }
}

/** fsync a directory, so that creates, renames and unlinks in it are durable. */
export const fsyncDir = (dir: string): void => {
  const fd = fs.openSync(dir, "r")
  try {
    fs.fsyncSync(fd)
  } finally {
    fs.closeSync(fd)
  }
}

/** Mode of every file the log creates. */
export const FILE_MODE = 0o600
/** Mode of the log directory when the log creates it. */
export const DIR_MODE = 0o700

/**
 * `O_DSYNC` where the platform has it (Linux, macOS; 0 elsewhere): a write on a descriptor opened with
 * it returns once its data (and the metadata needed to read it back, a grown size) is on stable
 * storage, as `write` + `fdatasync` of that range, in one system call.
 */
export const O_DSYNC: number = fs.constants.O_DSYNC ?? 0

/** How the writer opens a segment: read-write, and `O_DSYNC` when it syncs (`fsync: "always"`). */
export const segmentFlags = (sync: boolean): number => fs.constants.O_RDWR | (sync ? O_DSYNC : 0)

/**
 * Create an empty segment (it must not exist), sync it and the directory, and return it open for
 * writing (`segmentFlags`). `sync: false` skips both syncs (the `fsync: "never"` mode).
 */
export const createSegment = (dir: string, number: number, sync: boolean): { fd: number; path: string } => {
  const path = join(dir, segmentName(number, "log"))
  const fd = fs.openSync(path, fs.constants.O_CREAT | fs.constants.O_EXCL | segmentFlags(sync), FILE_MODE)
  try {
    if (sync) {
      fs.fsyncSync(fd)
      fsyncDir(dir)
    }
  } catch (e) {
    fs.closeSync(fd)
    throw e
  }
  return { fd, path }
}

const WINDOW = 1 << 20

export const PAGE = 4096
/** How far past the source's offset within its page a read lands in its buffer (see `skewed`). */
const SKEW = 2048

/**
 * `n` bytes of `buf` (which has room for `n + PAGE`) for a read of file position `position`, placed
 * so that the destination's offset within a page is `SKEW` bytes past the source's (where the buffer
 * starts on a page, as a large allocation does). The kernel copies a read out of the page cache with
 * `rep movsb`, which on this machine's AMD EPYC is ~4x slower when the destination is at (or just past)
 * the source's offset within the page (page aliasing, glibc bug 30994): hashing the 368 MB a 1M-entry
 * log's checkpoint covers, page-aligned reads into a page-aligned buffer cost ~150 ms of system
 * time, skewed ~40 ms (bench/README.md, "Session 12").
 */
export const skewed = (buf: Buffer, position: number, n: number): Buffer => {
  const at = (position + SKEW) & (PAGE - 1)
  return buf.subarray(at, at + n)
}

/**
 * One read buffer for a pass over many files that reads one file at a time, synchronously
 * (recovery: the CRC-32 of the files a checkpoint covers, then the replay of the rest), instead of a
 * new one a file. Fresh memory costs a page fault on the first touch of each 4 KiB page, which
 * is ~13 µs on the machine of bench/README.md ("Reopen after a crash, round 3"): a new 1 MiB
 * window for each of the 23 files a 1M-entry log's checkpoint covers was ~6,000 faults, ~80 ms.
 * Only one reader uses it at a time; nothing keeps a view of it past its file.
 */
export class ReadWindow {
  private buf: Buffer = Buffer.alloc(0)
  /**
   * `n` bytes to read file position `position` into (placed as `skewed` says), in a buffer of at least
   * `WINDOW` once it grows; what it held is not kept.
   */
  forRead(position: number, n: number): Buffer {
    if (this.buf.length < n + PAGE) this.buf = Buffer.allocUnsafe(Math.max(n, WINDOW) + PAGE)
    return skewed(this.buf, position, n)
  }
}

/** A new buffer of `n` bytes to read file position `position` into (placed as `skewed` says). */
export const readBuffer = (position: number, n: number): Buffer => skewed(Buffer.allocUnsafe(n + PAGE), position, n)

let zeroBytes: Buffer | undefined
/** `n` (at most `WINDOW`) zero bytes, from one buffer shared by every reader. */
const zeros = (n: number): Buffer => (zeroBytes ??= Buffer.alloc(WINDOW)).subarray(0, n)

/**
 * Reads records of one file front to back through a bounded window. A declared length is checked
 * against `maxPayload` before the window grows to hold it. Keeps the CRC-32 of the bytes read so far
 * (`checksum`): a checkpoint names each file with it.
 */
export class SegmentReader {
  private buf: Buffer = Buffer.alloc(0)
  private bufStart = 0
  private bufLen = 0
  offset: number
  /** CRC-32 of the file's bytes [0, crcTo). */
  private crc: number
  private crcTo: number

  /** From `start` (a record boundary), where the bytes before hash to `crc`. */
  constructor(
    private readonly fd: number,
    readonly size: number,
    private readonly maxPayload: number,
    start = 0,
    crc = 0,
    /** Where the window comes from (a pass over many files shares one). */
    private readonly window = new ReadWindow()
  ) {
    this.offset = start
    this.crcTo = start
    this.crc = crc
    this.bufStart = start
  }

  /** Extend the CRC over the window's bytes up to `to` (records read whole). */
  private sumTo(to: number): void {
    if (to <= this.crcTo) return
    this.crc = crc32(this.buf.subarray(this.crcTo - this.bufStart, to - this.bufStart), this.crc)
    this.crcTo = to
  }

  /** CRC-32 of the bytes [0, `to`) (`to`: the end of the last record read, or where it stops). */
  checksum(to: number): number {
    this.sumTo(to)
    return this.crc
  }

  /** Called before the window's bytes are replaced (records decoded from it point into it until then). */
  beforeFill: (() => void) | undefined

  private fill(at: number, want: number): void {
    this.beforeFill?.()
    this.sumTo(at)
    const need = Math.min(Math.max(want, WINDOW), this.size - at)
    this.buf = this.window.forRead(at, need)
    let got = 0
    while (got < need) {
      const n = fs.readSync(this.fd, this.buf, got, need - got, at + got)
      if (n === 0) break
      got += n
    }
    this.bufStart = at
    this.bufLen = got
  }

  /** The record at `offset`, or why there is none; `undefined` at the end of the file. */
  next(): Decoded | Invalid | undefined {
    const at = this.offset
    if (at >= this.size) return undefined
    if (at < this.bufStart || at + HEADER_BYTES > this.bufStart + this.bufLen) this.fill(at, HEADER_BYTES)
    let rel = at - this.bufStart
    let r = decodeAt(this.buf, rel, this.bufLen - rel, this.size - at, this.maxPayload)
    if (r === "cut-short" && this.size - at > this.bufLen - rel) {
      // The window ends before the record: only now that the length passed its check, widen it.
      this.fill(at, HEADER_BYTES + this.buf.readUInt32BE(rel + 4))
      rel = 0
      r = decodeAt(this.buf, rel, this.bufLen, this.size - at, this.maxPayload)
    }
    if (typeof r !== "string") this.offset = at + r.bytes
    return r
  }

  /** Is every byte from `from` to the end of the file zero (preallocated space the writer has not reached)? */
  zeroFrom(from: number): boolean {
    const chunk = Buffer.allocUnsafe(Math.min(WINDOW, Math.max(this.size - from, 1)))
    for (let at = from; at < this.size;) {
      const n = fs.readSync(this.fd, chunk, 0, Math.min(chunk.length, this.size - at), at)
      if (n === 0) return false
      if (!chunk.subarray(0, n).equals(zeros(n))) return false
      at += n
    }
    return true
  }

  /**
   * Is there any record with a valid CRC and an lsn above `afterLsn` at or past `from`? Used to tell a
   * torn tail (nothing valid follows) from corruption (valid records follow a bad one).
   */
  anyValidAfter(from: number, afterLsn: number): boolean {
    const rest = this.size - from
    if (rest < HEADER_BYTES) return false
    const buf = Buffer.allocUnsafe(rest)
    let got = 0
    while (got < rest) {
      const n = fs.readSync(this.fd, buf, got, rest - got, from + got)
      if (n === 0) break
      got += n
    }
    for (let p = 0; p + HEADER_BYTES <= got; p++) {
      // A record's kind byte is never 0: zero-filled space is passed over without decoding it.
      if (buf[p + 16] === 0) continue
      const r = decodeAt(buf, p, got - p, got - p, this.maxPayload)
      if (typeof r !== "string" && r.lsn > afterLsn) return true
    }
    return false
  }
}

/**
 * CRC-32 of the first `size` bytes of file `fd`, read a window at a time (from `from`, where the bytes
 * before hash to `crc`; `window`: a buffer shared with other reads of the same pass).
 */
export const checksumFile = (fd: number, size: number, from = 0, crc = 0, window?: ReadWindow): number => {
  const n0 = Math.min(WINDOW, Math.max(size - from, 1))
  // Reads of `WINDOW` bytes keep the position's offset within a page, so the buffer stays placed for it.
  const buf = window?.forRead(from, n0) ?? readBuffer(from, n0)
  let at = from
  while (at < size) {
    const n = fs.readSync(fd, buf, 0, Math.min(buf.length, size - at), at)
    if (n === 0) break
    crc = crc32(buf.subarray(0, n), crc)
    at += n
  }
  return at === size ? crc : -1
}
