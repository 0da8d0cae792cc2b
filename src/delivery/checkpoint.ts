/**
 * The CHECKPOINT file: the state at a clean close, so that the next open need not replay every
 * record (see docs/delivery-log-format.md, "The checkpoint"). It names every file it covers with
 * its size and the CRC-32 of those bytes; open uses it only when every covered file still hashes
 * to that, and otherwise replays as if it were not there. It is a cache of the log, never part of
 * it: a missing, damaged or stale one costs time, never a record.
 */
import * as fs from "node:fs"
import { endianness } from "node:os"
import { join } from "node:path"
import { crc32 } from "node:zlib"
import type { AckedParts } from "./ackedWindow.js"
import { capacityFor, type Runs } from "./idRing.js"
import type { KeyedColumns } from "./keyedRing.js"
import { ackedBytes, entryBytes, type EntryData, readAcked, readEntry, writeAcked, writeEntry } from "./payload.js"
import { FILE_MODE } from "./segment.js"

export const CHECKPOINT = "CHECKPOINT"

/** Points where a test may crash the process while a running checkpoint is written (`hooks.step`). */
export type CheckpointStep = "checkpoint-captured" | "checkpoint-temp-written" | "checkpoint-renamed"

const MAGIC = Buffer.from("SYCKPT01", "latin1")

/** A file the checkpoint covers: its first `size` bytes hash to `crc`. */
export interface Covered {
  readonly number: number
  readonly kind: "log" | "snap"
  readonly size: number
  readonly crc: number
}

/** A live entry and where its record is (file code, offset; code -1: not known). */
export interface PlacedEntry {
  readonly entry: EntryData
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

interface Header {
  readonly endian: string
  readonly files: ReadonlyArray<Covered>
  readonly nextLsn: number
  readonly nextSeq: number
  readonly liveBytes: number
  readonly live: number
  readonly kept: number
  readonly plain: readonly [count: number, runs: number]
  readonly keyed: readonly [count: number, runs: number]
  /** Cells of the plain ring's id table, the keyed ring's id and digest tables (0: none stored; absent before they were). */
  readonly tables?: readonly [number, number, number]
}

const NONE = 0xffff_ffff

const bytesOf = (a: Uint32Array | Uint8Array | Float64Array | Int32Array): Buffer =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength)

const runsBytes = (r: Runs): number => 12 * r.at.length

/** A live entry and the address of its record (addresses.ts; -1: not known). */
export interface LiveAt {
  readonly entry: EntryData
  readonly address: number
}

/**
 * A checkpoint's state, serialised when it was captured (the live state goes on changing); the files
 * it covers are named, and its CRC-32 taken, when it is written (`frameCheckpoint`).
 */
export interface CapturedCheckpoint {
  readonly header: Omit<Header, "endian" | "files">
  /** Live entries, kept acked, plain ring, keyed ring. */
  readonly body: Buffer
  /** Pairs: where a live entry's file code is in `body` (its offset follows), and the address of its record. */
  readonly places: ReadonlyArray<number>
}

/** Serialise the state (one buffer: the checkpoint of a log with 1M keyed ids is ~37 MB). */
export const captureCheckpoint = (
  meta: { readonly nextLsn: number; readonly nextSeq: number; readonly liveBytes: number },
  live: ReadonlyArray<LiveAt>,
  acked: AckedParts
): CapturedCheckpoint => {
  const { kept, plain, keyed } = acked
  const liveSizes = live.map((p) => entryBytes(p.entry))
  const keptSizes = kept.map(([id, , entry]) => ackedBytes(id, entry))
  const tables = [plain.table, keyed.tables?.[0], keyed.tables?.[1]]
  const size = liveSizes.reduce((a, n) => a + 20 + n, 0) +
    keptSizes.reduce((a, n) => a + 12 + n, 0) +
    16 * plain.count + runsBytes(plain.runs) +
    37 * keyed.count + runsBytes(keyed.runs) +
    tables.reduce((a, t) => a + 4 * (t?.length ?? 0), 0)
  const buf = Buffer.allocUnsafe(size)
  const places: Array<number> = []
  let at = 0
  live.forEach((p, i) => {
    at = buf.writeUInt32LE(liveSizes[i]!, at)
    if (p.address >= 0) places.push(at, p.address)
    at = buf.writeUInt32LE(NONE, at)
    at = buf.writeUInt32LE(0, at)
    at = buf.writeDoubleLE(p.entry.bytes, at)
    at = writeEntry(buf, at, p.entry)
  })
  kept.forEach(([id, time, entry, bytes], i) => {
    at = buf.writeUInt32LE(keptSizes[i]!, at)
    at = buf.writeDoubleLE(bytes, at)
    at = writeAcked(buf, at, id, time, entry)
  })
  const put = (a: Uint32Array | Uint8Array | Float64Array | Int32Array): void => {
    at += bytesOf(a).copy(buf, at)
  }
  const putRuns = (r: Runs): void => {
    put(Float64Array.from(r.at))
    put(Uint32Array.from(r.count))
  }
  put(plain.words)
  putRuns(plain.runs)
  for (const a of [keyed.words, keyed.digests, keyed.files, keyed.offsets, keyed.bytes, keyed.flags]) put(a)
  putRuns(keyed.runs)
  for (const t of tables) if (t !== undefined) put(t)
  if (at !== size) throw new Error(`a checkpoint body of ${at} bytes where ${size} were counted`)
  return {
    header: {
      nextLsn: meta.nextLsn,
      nextSeq: meta.nextSeq,
      liveBytes: meta.liveBytes,
      live: live.length,
      kept: kept.length,
      plain: [plain.count, plain.runs.at.length],
      keyed: [keyed.count, keyed.runs.at.length],
      tables: [tables[0]?.length ?? 0, tables[1]?.length ?? 0, tables[2]?.length ?? 0]
    },
    body: buf,
    places
  }
}

/**
 * The checkpoint's bytes (magic and header, body, CRC-32): `files` as covered, each live entry's
 * record located by `locate` (an address to file code and offset; not found: code none).
 */
export const frameCheckpoint = (
  c: CapturedCheckpoint,
  files: ReadonlyArray<Covered>,
  locate: (address: number, out: Uint32Array) => boolean
): Array<Buffer> => {
  const place = new Uint32Array(2)
  for (let i = 0; i < c.places.length; i += 2) {
    if (!locate(c.places[i + 1]!, place)) continue
    c.body.writeUInt32LE(place[0]!, c.places[i]!)
    c.body.writeUInt32LE(place[1]!, c.places[i]! + 4)
  }
  const header: Header = { endian: endianness(), files, ...c.header }
  const json = Buffer.from(JSON.stringify(header))
  const head = Buffer.allocUnsafe(MAGIC.length + 4 + json.length)
  MAGIC.copy(head, 0)
  head.writeUInt32LE(json.length, MAGIC.length)
  json.copy(head, MAGIC.length + 4)
  const tail = Buffer.allocUnsafe(4)
  tail.writeUInt32LE(crc32(c.body, crc32(head)), 0)
  return [head, c.body, tail]
}

const writeAllSync = (fd: number, bufs: ReadonlyArray<Buffer>): void => {
  for (const buf of bufs) {
    let off = 0
    while (off < buf.length) off += fs.writeSync(fd, buf, off, buf.length - off)
  }
}

/** Write the checkpoint of `dir` (temporary file, then rename). No sync: a torn one fails its CRC. */
export const writeCheckpoint = (dir: string, bufs: ReadonlyArray<Buffer>): void => {
  const temp = join(dir, `${CHECKPOINT}.tmp`)
  const fd = fs.openSync(temp, fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_WRONLY, FILE_MODE)
  try {
    writeAllSync(fd, bufs)
  } finally {
    fs.closeSync(fd)
  }
  fs.renameSync(temp, join(dir, CHECKPOINT))
}

/** Remove the checkpoint of `dir` (it no longer matches the files). */
export const removeCheckpoint = (dir: string): void => {
  fs.rmSync(join(dir, CHECKPOINT), { force: true })
}

class Short extends Error {}

/** A cursor over the checkpoint's bytes that throws `Short` past their end. */
class Cursor {
  constructor(
    readonly buf: Buffer,
    public at: number,
    readonly end: number
  ) {}
  take(n: number): number {
    const at = this.at
    if (at + n > this.end) throw new Short()
    this.at += n
    return at
  }
  u32(): number {
    return this.buf.readUInt32LE(this.take(4))
  }
  f64(): number {
    return this.buf.readDoubleLE(this.take(8))
  }
}

/**
 * Reads the checkpoint file front to back, hashing every byte read: small parts into buffers, the
 * rings' columns straight from the file into arrays of the size a restore gives the ring (no copy of
 * the whole file in between). Throws `Short` past `end` (the CRC's place).
 */
class FileCursor {
  crc = 0
  constructor(
    private readonly fd: number,
    public at: number,
    readonly end: number
  ) {}
  private fill(into: Uint8Array): void {
    if (this.at + into.length > this.end) throw new Short()
    let got = 0
    while (got < into.length) {
      const n = fs.readSync(this.fd, into, got, into.length - got, this.at + got)
      if (n === 0) throw new Short()
      got += n
    }
    this.at += got
    // Not on no bytes: zlib's crc32 of a NULL buffer (an empty ArrayBuffer's) is 0, not the CRC carried in.
    if (got > 0) this.crc = crc32(into, this.crc)
  }
  bytes(n: number): Buffer {
    const out = Buffer.allocUnsafe(n)
    this.fill(out)
    return out
  }
  /** `n` values into a new array with room for `room` (the rest zero). */
  array<A extends Uint32Array | Uint8Array | Float64Array | Int32Array>(
    make: new(n: number) => A,
    n: number,
    room = n
  ): A {
    const out = new make(room)
    this.fill(new Uint8Array(out.buffer, 0, out.BYTES_PER_ELEMENT * n))
    return out
  }
  runs(n: number): Runs {
    return { at: Array.from(this.array(Float64Array, n)), count: Array.from(this.array(Uint32Array, n)) }
  }
}

const isCount = (n: unknown): n is number => typeof n === "number" && Number.isSafeInteger(n) && n >= 0

/** The checkpoint of `dir`, or `undefined`: none, damaged, or written on a machine of the other byte order. */
export const readCheckpoint = (dir: string): CheckpointState | undefined => {
  let fd: number
  try {
    fd = fs.openSync(join(dir, CHECKPOINT), "r")
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined
    throw e
  }
  try {
    const size = fs.fstatSync(fd).size
    const end = size - 4
    if (end < MAGIC.length + 4) return undefined
    const f = new FileCursor(fd, 0, end)
    const pre = f.bytes(MAGIC.length + 4)
    if (!pre.subarray(0, MAGIC.length).equals(MAGIC)) return undefined
    const jsonLen = pre.readUInt32LE(MAGIC.length)
    if (MAGIC.length + 4 + jsonLen > end) return undefined
    const h = JSON.parse(f.bytes(jsonLen).toString("utf8")) as Header
    if (h.endian !== endianness()) return undefined
    const [pn, pr] = h.plain
    const [kn, kr] = h.keyed
    const [pt, kt, dt] = h.tables ?? [0, 0, 0]
    if (![h.live, h.kept, pn, pr, kn, kr, pt, kt, dt].every(isCount)) return undefined
    // The rings' bytes follow the live and kept entries (whose sizes the header does not give): what is left is theirs.
    const ringBytes = 16 * pn + 12 * pr + 37 * kn + 12 * kr + 4 * (pt + kt + dt)
    const entries = f.bytes(end - f.at - ringBytes)
    // The rings' columns go straight into arrays of the size a restore gives the ring (no second copy).
    const pc = capacityFor(pn)
    const plain = { count: pn, words: f.array(Uint32Array, 4 * pn, 4 * pc), runs: f.runs(pr) }
    const kc = capacityFor(kn)
    const keyed: KeyedColumns = {
      count: kn,
      words: f.array(Uint32Array, 4 * kn, 4 * kc),
      digests: f.array(Uint32Array, 2 * kn, 2 * kc),
      files: f.array(Uint32Array, kn, kc),
      offsets: f.array(Uint32Array, kn, kc),
      bytes: f.array(Uint32Array, kn, kc),
      flags: f.array(Uint8Array, kn, kc),
      runs: f.runs(kr)
    }
    const table = (n: number): Int32Array | undefined => (n > 0 ? f.array(Int32Array, n) : undefined)
    const plainTable = table(pt)
    const keyedTables = [table(kt), table(dt)] as const
    const tail = Buffer.alloc(4)
    if (fs.readSync(fd, tail, 0, 4, end) !== 4 || f.crc !== tail.readUInt32LE(0)) return undefined
    const c = new Cursor(entries, 0, entries.length)
    const live: Array<PlacedEntry> = []
    for (let i = 0; i < h.live; i++) {
      const n = c.u32()
      const code = c.u32()
      const offset = c.u32()
      const bytes = c.f64()
      const entry = readEntry(entries, c.take(n), c.at)
      entry.bytes = bytes
      live.push({ entry, code: code === NONE ? -1 : code, offset })
    }
    const kept: Array<readonly [string, number, EntryData | undefined, number]> = []
    for (let i = 0; i < h.kept; i++) {
      const n = c.u32()
      const bytes = c.f64()
      const a = readAcked(entries, c.take(n), c.at)
      if (a.entry !== undefined) a.entry.bytes = bytes
      kept.push([a.id, a.at, a.entry, bytes])
    }
    if (c.at !== c.end) return undefined
    return {
      files: h.files,
      nextLsn: h.nextLsn,
      nextSeq: h.nextSeq,
      liveBytes: h.liveBytes,
      live,
      acked: { kept, plain: { ...plain, table: plainTable }, keyed: { ...keyed, tables: keyedTables } }
    }
  } catch (e) {
    // A failed read is the I/O error it is; anything else (cut short, a header that does not parse, a
    // CRC-valid checkpoint written by another version) means: replay instead.
    if ((e as NodeJS.ErrnoException)?.syscall !== undefined) throw e
    if (process.env.DBG) console.log(e)
    return undefined
  } finally {
    fs.closeSync(fd)
  }
}
