/**
 * Replaying one file into the state, strictly: a snapshot (it was complete and synced before it got
 * its name) or a log segment (a torn tail only at the very end of the last one). Keyed entries get
 * the address of their record (addresses.ts), so that the dedupe window can keep that instead of the
 * entry once they are acked.
 */
import * as fs from "node:fs"
import { CorruptLog } from "./corrupt.js"
import { LazyAppends } from "./lazyAppends.js"
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
import { type ReadWindow, SegmentReader } from "./segment.js"
import type { LogState, SnapshotBeginPayload, SnapshotEndPayload } from "./state.js"
import { parseUuidBytes } from "./uuidWords.js"

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

const applyLogRecord = (
  state: LogState,
  lazy: LazyAppends,
  d: Decoded,
  path: string,
  offset: number,
  address: number
): void => {
  const { buf, start, end } = d
  try {
    switch (d.kind) {
      case Kind.append: {
        if (lazy.append(buf, start, end, d.bytes, address)) return
        lazy.flush()
        const e = readAppend(buf, start, end)
        e.bytes = d.bytes
        e.pos = address
        state.insert(e)
        return
      }
      case Kind.attempt:
      case Kind.attemptDead: {
        if (lazy.holds(buf, start, end)) lazy.flush()
        const a = readAttempt(buf, start, end)
        state.applyAttempt(a.id, a.attempts, a.lastError, a.nextAttemptAt)
        if (d.kind === Kind.attemptDead) state.applyDead(a.id, a.lastError)
        return
      }
      case Kind.ack: {
        if (lazy.ack(buf, start, end)) return
        const a = readAck(buf, start, end)
        state.applyAck(a.id, a.at)
        return
      }
      case Kind.dead: {
        if (lazy.holds(buf, start, end)) lazy.flush()
        const a = readDead(buf, start, end)
        state.applyDead(a.id, a.reason)
        return
      }
      case Kind.requeue:
        if (lazy.holds(buf, start, end)) lazy.flush()
        state.applyRequeue(readRequeue(buf, start, end))
        return
      case Kind.started:
        if (lazy.started(buf, start, end)) return
        state.applyStarted(readIdOnly(buf, start, end, "started"))
        return
    }
  } catch (e) {
    badPayload(e, path, offset)
  }
  throw new CorruptLog(path, offset, `a snapshot record (kind ${d.kind}) in a log segment`)
}

/** Open `path` for reading, run `f` with its descriptor and size, close it. */
export const withFile = <A>(path: string, f: (fd: number, size: number) => A): A => {
  const fd = fs.openSync(path, "r")
  try {
    return f(fd, fs.fstatSync(fd).size)
  } finally {
    fs.closeSync(fd)
  }
}

/** Payload bytes of a snapshot acked record of a canonical id without entry: idLen, id, at, hasEntry. */
const PLAIN_ACKED_BYTES = 1 + 36 + 8 + 1
const words = new Uint32Array(4)

/** A snapshot acked record: a plain canonical id straight from its bytes, anything else through `readAcked`. */
const applyAckedRecord = (state: LogState, r: Decoded, code: number, at: number): void => {
  const { buf, start, end } = r
  if (
    end - start === PLAIN_ACKED_BYTES && buf[start] === 36 && buf[end - 1] === 0 &&
    parseUuidBytes(buf, start + 1, 36, words)
  ) {
    state.applyAckedPlain(words, buf.readDoubleBE(start + 37))
    return
  }
  const a = readAcked(buf, start, end)
  state.applyAcked(a.id, a.at, a.entry, r.bytes, code, at)
}

/**
 * Replay snapshot `path` (file code `code`, its records at addresses from `base`): strict, it was
 * complete and synced before it got its name. Returns the next lsn, its size and CRC-32. `window`:
 * the read buffer of the pass (segment.ts).
 */
export const replaySnapshot = (
  state: LogState,
  path: string,
  code: number,
  base: number,
  maxPayload: number,
  window?: ReadWindow
): { nextLsn: number; size: number; crc: number } =>
  withFile(path, (fd, size) => {
    const reader = new SegmentReader(fd, size, maxPayload, 0, 0, window)
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
        const plain = begin.plain
        if (typeof plain === "number" && typeof begin.acked === "number" && plain >= 0 && plain <= begin.acked) {
          state.acked.reserve(plain, begin.acked - plain)
        }
        continue
      }
      if (r.kind === Kind.snapshotEntry) {
        try {
          const e = readEntry(r.buf, r.start, r.end)
          e.bytes = r.bytes
          e.pos = base + at
          state.insert(e)
        } catch (e) {
          badPayload(e, path, at)
        }
      } else if (r.kind === Kind.snapshotAcked) {
        try {
          applyAckedRecord(state, r, code, at)
        } catch (e) {
          badPayload(e, path, at)
        }
      } else if (r.kind === Kind.snapshotEnd) {
        if ((parseJson(r, path, at) as SnapshotEndPayload).records !== lsn) {
          throw new CorruptLog(path, at, "a snapshot end record with a wrong count")
        }
        if (reader.offset !== size) throw new CorruptLog(path, reader.offset, "bytes after a snapshot's end record")
        if (begin.nextSeq > state.nextSeq) state.nextSeq = begin.nextSeq
        return { nextLsn: begin.nextLsn, size, crc: reader.checksum(size) }
      } else throw new CorruptLog(path, at, `a log record (kind ${r.kind}) inside a snapshot`)
    }
  })

/** What replaying a log segment found. */
export interface LogReplay {
  /** Its size once recovered (where a torn tail is cut). */
  readonly size: number
  /** CRC-32 of those bytes. */
  readonly crc: number
  /** The lsn the next record must have. */
  readonly expected: number
  readonly truncate: Truncate | undefined
}

/** Where the last segment is cut on open; `zeros`: only zero-filled space follows its last record (no torn write). */
export interface Truncate {
  readonly path: string
  readonly offset: number
  readonly why: string
  readonly zeros?: boolean
}

/**
 * Replay log segment `path` from `from` (a record boundary: 0, or where a checkpoint's bytes end,
 * which hash to `crc`), its records at addresses from `base`, the first one numbered `expected`.
 * `last`: the last segment, where a torn tail is cut rather than corrupt. `window`: the read buffer
 * of the pass (segment.ts).
 */
export const replayLog = (
  state: LogState,
  path: string,
  base: number,
  from: { readonly offset: number; readonly crc: number; readonly expected: number },
  last: boolean,
  maxPayload: number,
  window?: ReadWindow
): LogReplay =>
  withFile(path, (fd, size) => {
    const reader = new SegmentReader(fd, size, maxPayload, from.offset, from.crc, window)
    // Appends acked a few records later never become entries (lazyAppends.ts); before the window moves
    // on, the payloads of those still kept are copied aside.
    const lazy = new LazyAppends(state)
    reader.beforeFill = () => lazy.beforeFill()
    let expected = from.expected
    for (;;) {
      const at = reader.offset
      const r = reader.next()
      if (r === undefined) {
        lazy.flush()
        return { size, crc: reader.checksum(size), expected, truncate: undefined }
      }
      if (typeof r === "string") {
        lazy.flush()
        // The writer fills the active segment ahead with zeros and overwrites them in place: in the
        // last segment, a record boundary with only zeros from there to the end is the end of its records.
        if (last && reader.zeroFrom(at)) {
          return {
            size: at,
            crc: reader.checksum(at),
            expected,
            truncate: { path, offset: at, why: "zero-filled space after the last record", zeros: true }
          }
        }
        // A torn write leaves a prefix: a cut record, or one failing its CRC. A length over the limit
        // is never that (unless the limit was lowered since), so it is corruption wherever it is.
        // An unknown kind passed its CRC: written whole (by a newer version?), not torn either.
        if (last && r !== "too-long" && r !== "bad-kind" && !reader.anyValidAfter(at, expected - 1)) {
          return {
            size: at,
            crc: reader.checksum(at),
            expected,
            truncate: { path, offset: at, why: describeInvalid(r) }
          }
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
      applyLogRecord(state, lazy, r, path, at, base + at)
      expected++
    }
  })
