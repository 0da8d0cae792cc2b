/**
 * Reading the CHECKPOINT file (checkpoint.ts writes it; docs/delivery-log-format.md, "The
 * checkpoint"): its header from the end, then every byte front to back, hashed as it is read, the
 * rings' columns straight into the arrays the restored rings keep. Anything that does not check out
 * (cut short, a CRC-32 mismatch, another format or byte order) means: no checkpoint, replay instead.
 */
import * as fs from "node:fs"
import { endianness } from "node:os"
import { join } from "node:path"
import { crc32 } from "node:zlib"
import {
  BY_PLACE,
  CHECKPOINT,
  type CheckpointState,
  type Header,
  MAGIC,
  MAGIC_2,
  NONE,
  type PlacedEntry,
  type PlacedState,
  TRAILER_BYTES
} from "./checkpoint.js"
import type { EntryData } from "./entryData.js"
import { capacityFor, inAckOrder, type Runs } from "./idRing.js"
import type { KeyedColumns } from "./keyedRing.js"
import { readAcked, readEntry } from "./payload.js"

class Short extends Error {}

/** A cursor over the checkpoint's entries that throws `Short` past their end. */
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

/** Read `into.length` bytes of `fd` at `position`; throws `Short` at the end of the file. */
const readFully = (fd: number, into: Uint8Array, position: number): void => {
  let got = 0
  while (got < into.length) {
    const n = fs.readSync(fd, into, got, into.length - got, position + got)
    if (n === 0) throw new Short()
    got += n
  }
}

/**
 * Reads the checkpoint file front to back up to `end` (where its header starts), hashing every byte
 * read: small parts into buffers, the rings' columns straight into arrays of the size a restore gives
 * the ring (no copy of the whole file in between). Throws `Short` past `end`.
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
    readFully(this.fd, into, this.at)
    this.at += into.length
    // Not on no bytes: zlib's crc32 of a NULL buffer (an empty ArrayBuffer's) is 0, not the CRC carried in.
    if (into.length > 0) this.crc = crc32(into, this.crc)
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
    const at = this.array(Float64Array, n)
    return { at: Array.from(at), count: Array.from(this.array(Uint32Array, n)) }
  }
}

const isCount = (n: unknown): n is number => typeof n === "number" && Number.isSafeInteger(n) && n >= 0

/** The header at the end of the file of `size` bytes: it, where it starts, and its bytes and the trailer (hashed last). */
const readHeader = (fd: number, size: number) => {
  if (size < MAGIC.length + TRAILER_BYTES) return undefined
  // Another format (format 1's header is at the front) is dropped before its end is read as a header.
  const magic = Buffer.allocUnsafe(MAGIC.length)
  readFully(fd, magic, 0)
  if (!magic.equals(MAGIC) && !magic.equals(MAGIC_2)) return undefined
  const trailer = Buffer.allocUnsafe(TRAILER_BYTES)
  readFully(fd, trailer, size - TRAILER_BYTES)
  const jsonLen = trailer.readUInt32LE(0)
  const start = size - TRAILER_BYTES - jsonLen
  if (start < MAGIC.length) return undefined
  const json = Buffer.allocUnsafe(jsonLen)
  readFully(fd, json, start)
  const h = JSON.parse(json.toString("utf8")) as Header
  if (h.endian !== endianness()) return undefined
  return { h, start, json, trailer, magic }
}

/** A live entry by place (`BY_PLACE`): its id and state, filling `[start, end)` exactly (else `Short`). */
const readPlaced = (buf: Buffer, start: number, end: number, bytes: number): PlacedState => {
  const idEnd = start + 1 + buf[start]!
  if (idEnd + 17 > end) throw new Short()
  const status = buf[idEnd]!
  const errLen = buf.readUInt32BE(idEnd + 13)
  const errAt = idEnd + 17
  if (status > 3 || (errLen === NONE ? errAt : errAt + errLen) !== end) throw new Short()
  const next = buf.readDoubleBE(idEnd + 5)
  return {
    id: buf.toString("utf8", start + 1, idEnd),
    status: (status & 1) === 1 ? "dead" : "pending",
    started: (status & 2) === 2,
    attempts: buf.readUInt32BE(idEnd + 1),
    nextAttemptAt: Number.isNaN(next) ? undefined : next,
    lastError: errLen === NONE ? undefined : buf.toString("utf8", errAt, end),
    bytes
  }
}

/** The checkpoint of `dir`, or `undefined`: none, damaged, or written on a machine of the other byte order or by another version. */
export const readCheckpoint = (dir: string): CheckpointState | undefined => {
  let fd: number
  try {
    fd = fs.openSync(join(dir, CHECKPOINT), "r")
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined
    throw e
  }
  try {
    const found = readHeader(fd, fs.fstatSync(fd).size)
    if (found === undefined) return undefined
    const { h, start, json, trailer, magic } = found
    const [pn, pr] = h.plain
    const [kn, kr] = h.keyed
    const [pt, kt, dt] = h.tables
    const [ph, kh] = h.heads
    if (![h.live, h.kept, pn, pr, kn, kr, pt, kt, dt, ph, kh].every(isCount)) return undefined
    // Nothing is allocated for counts the file cannot hold (the CRC-32 is checked only at the end).
    if (MAGIC.length + 16 * pn + 37 * kn + 4 * (pt + kt + dt) + 12 * (pr + kr) > start) return undefined
    const f = new FileCursor(fd, 0, start)
    if (!f.bytes(MAGIC.length).equals(magic)) return undefined
    // Entries by place come with format 3.
    const byPlace = magic.equals(MAGIC)
    // The rings' columns go straight into arrays of the size a restore gives the ring (no second copy).
    const pc = capacityFor(pn)
    const plainWords = f.array(Uint32Array, 4 * pn, 4 * pc)
    const kc = capacityFor(kn)
    const keyed = {
      count: kn,
      words: f.array(Uint32Array, 4 * kn, 4 * kc),
      digests: f.array(Uint32Array, 2 * kn, 2 * kc),
      files: f.array(Uint32Array, kn, kc),
      offsets: f.array(Uint32Array, kn, kc),
      bytes: f.array(Uint32Array, kn, kc),
      flags: f.array(Uint8Array, kn, kc)
    }
    const table = (n: number): Int32Array | undefined => (n > 0 ? f.array(Int32Array, n) : undefined)
    const plainTable = table(pt)
    const keyedTables = [table(kt), table(dt)] as const
    const plainRuns = f.runs(pr)
    const keyedRuns = f.runs(kr)
    // What is left before the header is the entries'.
    const entries = f.bytes(start - f.at)
    if (crc32(trailer.subarray(0, 4), crc32(json, f.crc)) !== trailer.readUInt32LE(4)) return undefined
    // The tables as written count slots from slot 0 while the oldest id was at `heads`: in ack order now, in place.
    const inOrder = (t: Int32Array | undefined, n: number, head: number): Int32Array | undefined =>
      t === undefined || t.length !== 2 * capacityFor(n) || head >= capacityFor(n) ? undefined : inAckOrder(t, head, t)
    const c = new Cursor(entries, 0, entries.length)
    const live: Array<PlacedEntry> = []
    for (let i = 0; i < h.live; i++) {
      const n = c.u32()
      const code = c.u32()
      const offset = c.u32()
      const bytes = c.f64()
      if ((n & BY_PLACE) !== 0) {
        // Its record must be found: a place not located when it was written leaves the checkpoint unusable.
        if (!byPlace || code === NONE) return undefined
        const from = c.take(n & ~BY_PLACE)
        live.push({ entry: undefined, placed: readPlaced(entries, from, c.at, bytes), code, offset })
        continue
      }
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
    const keyedColumns: KeyedColumns = {
      ...keyed,
      runs: keyedRuns,
      tables: [inOrder(keyedTables[0], kn, kh), inOrder(keyedTables[1], kn, kh)]
    }
    return {
      files: h.files,
      nextLsn: h.nextLsn,
      nextSeq: h.nextSeq,
      liveBytes: h.liveBytes,
      live,
      acked: {
        kept,
        plain: { count: pn, words: plainWords, runs: plainRuns, table: inOrder(plainTable, pn, ph) },
        keyed: keyedColumns
      }
    }
  } catch (e) {
    // A failed read is the I/O error it is; anything else (cut short, a header that does not parse, a
    // CRC-valid checkpoint written by another version) means: replay instead.
    if ((e as NodeJS.ErrnoException)?.syscall !== undefined) throw e
    return undefined
  } finally {
    fs.closeSync(fd)
  }
}
