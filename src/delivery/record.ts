/**
 * Record framing of the delivery log (see docs/delivery-log-format.md).
 *
 * ```
 * 0       4       8               16  17                17+len
 * +-------+-------+---------------+---+-----------------+
 * | crc32 | len   | lsn           |kind| payload        |
 * +-------+-------+---------------+---+-----------------+
 * ```
 * All integers big-endian. `crc32` (zlib) covers bytes 4..17+len: the length, lsn, kind and payload,
 * so a damaged length is caught as well as damaged contents. Payloads: payload.ts.
 */
import { crc32 } from "node:zlib"
import { crc32Range } from "./crc32.js"

/** Bytes before the payload. */
export const HEADER_BYTES = 17

/** What a record says. The snapshot kinds only appear in `.snap` files. */
export const Kind = {
  append: 1,
  attempt: 2,
  ack: 3,
  dead: 4,
  requeue: 5,
  attemptDead: 6,
  started: 7,
  snapshotBegin: 16,
  snapshotEntry: 17,
  snapshotAcked: 18,
  snapshotEnd: 19
} as const
export type Kind = (typeof Kind)[keyof typeof Kind]

const validKinds = new Set<number>(Object.values(Kind))
/** True for a kind byte this version writes. */
export const isKind = (k: number): k is Kind => validKinds.has(k)

const TWO_32 = 0x1_0000_0000

/**
 * Write the header of the record at `buf[at]` whose `payloadBytes` bytes of payload are already in
 * place after it (at `at + HEADER_BYTES`), CRC-32 included. Returns the record's end.
 */
export const seal = (buf: Buffer, at: number, lsn: number, kind: Kind, payloadBytes: number): number => {
  const end = at + HEADER_BYTES + payloadBytes
  buf.writeUInt32BE(payloadBytes, at + 4)
  buf.writeUInt32BE(Math.floor(lsn / TWO_32), at + 8)
  buf.writeUInt32BE(lsn >>> 0, at + 12)
  buf[at + 16] = kind
  buf.writeUInt32BE(crc32Range(buf, at + 4, end), at)
  return end
}

/**
 * Frame `payload` (a string already measured at `payloadBytes` bytes; the snapshot's begin and end
 * records are JSON) as one record. Allocates exactly one buffer.
 */
export const encode = (lsn: number, kind: Kind, payload: string, payloadBytes: number): Buffer => {
  const buf = Buffer.allocUnsafe(HEADER_BYTES + payloadBytes)
  buf.write(payload, HEADER_BYTES, payloadBytes, "utf8")
  seal(buf, 0, lsn, kind, payloadBytes)
  return buf
}

/** A record read back: its payload is `buf[start, end)` (the reader's buffer, valid until its next read). */
export interface Decoded {
  readonly lsn: number
  readonly kind: Kind
  readonly buf: Buffer
  readonly start: number
  readonly end: number
  readonly bytes: number
}

/** Why bytes at an offset are not a record. */
export type Invalid = "short-header" | "too-long" | "cut-short" | "bad-kind" | "bad-crc"

/** Below this many bytes the table-driven CRC-32 is cheaper than a call of `zlib.crc32` (and its view). */
const SHORT_RECORD = 256

/** CRC-32 of `buf[start, end)`: the same value either way (a record's check is exactly as strict). */
const checkCrc = (buf: Buffer, start: number, end: number): number =>
  end - start < SHORT_RECORD ? crc32Range(buf, start, end) : crc32(buf.subarray(start, end))

/**
 * Decode the record at `buf[at]`, where `available` bytes from `at` are in `buf` and `fileRemaining`
 * bytes remain in the file from `at`. The length is checked against `maxPayload` before anything is
 * read past the header.
 */
export const decodeAt = (
  buf: Buffer,
  at: number,
  available: number,
  fileRemaining: number,
  maxPayload: number
): Decoded | Invalid => {
  if (fileRemaining < HEADER_BYTES || available < HEADER_BYTES) return "short-header"
  const len = buf.readUInt32BE(at + 4)
  if (len > maxPayload) return "too-long"
  if (HEADER_BYTES + len > fileRemaining) return "cut-short"
  if (HEADER_BYTES + len > available) return "cut-short"
  const kind = buf[at + 16]!
  const end = at + HEADER_BYTES + len
  if (checkCrc(buf, at + 4, end) !== buf.readUInt32BE(at)) return "bad-crc"
  if (!isKind(kind)) return "bad-kind"
  const lsn = buf.readUInt32BE(at + 8) * TWO_32 + buf.readUInt32BE(at + 12)
  return { lsn, kind, buf, start: at + HEADER_BYTES, end, bytes: HEADER_BYTES + len }
}

/** The human wording of an `Invalid`. */
export const describeInvalid = (why: Invalid): string => {
  switch (why) {
    case "short-header":
      return "a record header cut short"
    case "too-long":
      return "a record length over the limit (if `maxRecordBytes` was lowered since it was written, raise it back)"
    case "cut-short":
      return "a record cut short"
    case "bad-kind":
      return "an unknown record kind (written by a newer version?)"
    case "bad-crc":
      return "a record failing its CRC-32"
  }
}
