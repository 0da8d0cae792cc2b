/**
 * Binary payloads of the log's records (docs/delivery-log-format.md, "Payloads"). Replay reads the
 * fields it needs (id, seq, key, attempt state) straight from the bytes; a message stays the JSON text
 * it was written as (`EntryData.text`) until an entry is read. Integers and numbers are big-endian;
 * ids, keys and texts are UTF-8 with their byte length in front.
 *
 * Writers compute the payload size first (`*Bytes`), then fill a buffer at an offset (`write*`), so a
 * record is framed with one allocation. Readers throw `BadPayload` when the bytes do not add up.
 */
import { EntryData, utf8Bytes } from "./entryData.js"
import type { RawBuffer } from "./messageBytes.js"

export { utf8Bytes }

/** The payload's fields do not fit its length, or a flag is out of range: the record is corrupt. */
export class BadPayload extends Error {}

/** No `nextAttemptAt` (snapshot entries). */
const NONE_F64 = Number.NaN
/** No `lastError` (snapshot entries). */
const NONE_U32 = 0xffff_ffff

// ---- entry head: idLen u8 | id | seq f64 | enqueuedAt f64 | keyLen u32 | key ----

const headBytes = (idBytes: number, keyBytes: number): number => 1 + idBytes + 16 + 4 + keyBytes

const writeHead = (
  buf: Buffer,
  at: number,
  id: string,
  idBytes: number,
  seq: number,
  enqueuedAt: number,
  key: string | undefined,
  keyBytes: number
): number => {
  if (idBytes > 255) throw new RangeError(`an id over 255 bytes (${idBytes})`)
  buf[at] = idBytes
  at = 1 + at + buf.write(id, at + 1, idBytes, "utf8")
  return writeAppendFields(buf, at, seq, enqueuedAt, key, keyBytes)
}

/** A cursor over one payload; every read checks that it stays inside `[start, end)`. */
class Cursor {
  constructor(
    readonly buf: Buffer,
    public at: number,
    readonly end: number
  ) {}
  need(n: number): void {
    if (this.at + n > this.end) throw new BadPayload("a payload shorter than its fields")
  }
  u8(): number {
    this.need(1)
    return this.buf[this.at++]!
  }
  u32(): number {
    this.need(4)
    const v = this.buf.readUInt32BE(this.at)
    this.at += 4
    return v
  }
  f64(): number {
    this.need(8)
    const v = this.buf.readDoubleBE(this.at)
    this.at += 8
    return v
  }
  text(n: number): string {
    this.need(n)
    const s = this.buf.toString("utf8", this.at, this.at + n)
    this.at += n
    return s
  }
  rest(): string {
    const s = this.buf.toString("utf8", this.at, this.end)
    this.at = this.end
    return s
  }
}

/** The message text must look like what `checkMessage` writes (the CRC-32 already vouches for its bytes). */
const MESSAGE_START = Buffer.from("{\"channel\":", "latin1")
const checkMessageText = (buf: Buffer, at: number, end: number): void => {
  const n = MESSAGE_START.length
  let ok = end - at > n && buf[end - 1] === 0x7d
  for (let i = 0; ok && i < n; i++) ok = buf[at + i] === MESSAGE_START[i]
  if (!ok) {
    throw new BadPayload("a message that is not the JSON object the log writes")
  }
}

// ---- kind 1, append: head | message JSON ----

/** Payload bytes of an append record. */
export const appendBytes = (idBytes: number, keyBytes: number, textBytes: number): number =>
  headBytes(idBytes, keyBytes) + textBytes

/**
 * Write the fields of an append payload that follow its id (`at` is where the id ends, its length byte
 * and bytes already written); returns where the message text goes.
 */
export const writeAppendFields = (
  buf: Buffer,
  at: number,
  seq: number,
  enqueuedAt: number,
  key: string | undefined,
  keyBytes: number
): number => {
  buf.writeDoubleBE(seq, at)
  buf.writeDoubleBE(enqueuedAt, at + 8)
  buf.writeUInt32BE(keyBytes, at + 16)
  at += 20
  if (key !== undefined) at += buf.write(key, at, keyBytes, "utf8")
  return at
}

/** Write an append payload at `at`; returns its end. */
export const writeAppend = (
  buf: Buffer,
  at: number,
  id: string,
  idBytes: number,
  seq: number,
  enqueuedAt: number,
  key: string | undefined,
  keyBytes: number,
  text: string,
  textBytes: number
): number => {
  at = writeHead(buf, at, id, idBytes, seq, enqueuedAt, key, keyBytes)
  return at + buf.write(text, at, textBytes, "utf8")
}

/**
 * Check an append payload's fields as `readAppend` does (throws `BadPayload`) without reading them
 * out; returns where its key ends (its message starts). Replay checks every append so.
 */
export const checkAppend = (buf: Buffer, start: number, end: number): number => {
  const idEnd = start + 1 + buf[start]!
  const keyAt = idEnd + 20
  if (keyAt > end) throw new BadPayload("a payload shorter than its fields")
  const keyEnd = keyAt + buf.readUInt32BE(idEnd + 16)
  if (keyEnd > end) throw new BadPayload("a payload shorter than its fields")
  checkMessageText(buf, keyEnd, end)
  return keyEnd
}

/** Read an append payload as a pending entry (the hot path of replay: no cursor object). */
export const readAppend = (buf: Buffer, start: number, end: number): EntryData => {
  const idEnd = start + 1 + buf[start]!
  const keyAt = idEnd + 20
  const keyEnd = checkAppend(buf, start, end)
  return new EntryData(
    buf.toString("utf8", start + 1, idEnd),
    buf.readDoubleBE(idEnd),
    buf.readDoubleBE(idEnd + 8),
    keyEnd === keyAt ? undefined : buf.toString("utf8", keyAt, keyEnd),
    buf.toString("utf8", keyEnd, end),
    0,
    undefined,
    undefined,
    "pending",
    true,
    end - start
  )
}

// ---- kind 17, snapshot entry: head | status u8 (bit 0: dead, bit 1: attempt started) | attempts u32 | nextAttemptAt f64 | errLen u32 | lastError | message JSON ----

/** Payload bytes of a snapshot entry (also the `entry` of a snapshot acked record). */
export const entryBytes = (e: EntryData): number =>
  headBytes(utf8Bytes(e.id), e.key === undefined ? 0 : utf8Bytes(e.key)) +
  1 + 4 + 8 + 4 + (e.lastError === undefined ? 0 : utf8Bytes(e.lastError)) + e.textLength

/** Write a whole entry at `at`; returns its end. */
export const writeEntry = (buf: Buffer, at: number, e: EntryData): number => {
  at = writeHead(buf, at, e.id, utf8Bytes(e.id), e.seq, e.enqueuedAt, e.key, e.key === undefined ? 0 : utf8Bytes(e.key))
  return e.writeText(buf, writeState(buf, at, e))
}

/** Bytes of an entry's delivery state as kind 17 holds it (status | attempts | nextAttemptAt | errLen | lastError). */
export const stateBytes = (e: EntryData): number =>
  1 + 4 + 8 + 4 + (e.lastError === undefined ? 0 : utf8Bytes(e.lastError))

/** Write an entry's delivery state at `at` (`stateBytes`); returns its end. */
export const writeState = (buf: Buffer, at: number, e: EntryData): number => {
  buf[at] = (e.status === "dead" ? 1 : 0) | (e.started ? 2 : 0)
  buf.writeUInt32BE(e.attempts, at + 1)
  buf.writeDoubleBE(e.nextAttemptAt ?? NONE_F64, at + 5)
  at += 13
  if (e.lastError === undefined) {
    buf.writeUInt32BE(NONE_U32, at)
    return at + 4
  }
  const n = utf8Bytes(e.lastError)
  buf.writeUInt32BE(n, at)
  return at + 4 + buf.write(e.lastError, at + 4, n, "utf8")
}

/** `writeState` of a fresh state (no attempts, no time, no error) but for its flags; returns its end (17 bytes on). */
export const writeStateFresh = (buf: Buffer, at: number, dead: boolean, started: boolean): number => {
  buf[at] = (dead ? 1 : 0) | (started ? 2 : 0)
  buf.writeUInt32BE(0, at + 1)
  buf.writeDoubleBE(NONE_F64, at + 5)
  buf.writeUInt32BE(NONE_U32, at + 13)
  return at + 17
}

const readEntryAt = (c: Cursor): EntryData => {
  const id = c.text(c.u8())
  const seq = c.f64()
  const enqueuedAt = c.f64()
  const keyLen = c.u32()
  const key = keyLen === 0 ? undefined : c.text(keyLen)
  const status = c.u8()
  if (status > 3) throw new BadPayload("an entry status byte with bits other than dead (1) and started (2)")
  const attempts = c.u32()
  const next = c.f64()
  const errLen = c.u32()
  const lastError = errLen === NONE_U32 ? undefined : c.text(errLen)
  checkMessageText(c.buf, c.at, c.end)
  const bytes = c.end - c.at
  return new EntryData(
    id,
    seq,
    enqueuedAt,
    key,
    c.rest(),
    attempts,
    lastError,
    Number.isNaN(next) ? undefined : next,
    (status & 1) === 1 ? "dead" : "pending",
    true,
    bytes,
    (status & 2) === 2
  )
}

/** Read a snapshot entry payload. */
export const readEntry = (buf: Buffer, start: number, end: number): EntryData =>
  readEntryAt(new Cursor(buf, start, end))

// ---- kind 2, attempt: idLen u8 | id | attempts u32 | nextAttemptAt f64 | lastError (rest) ----
// ---- kind 3, ack: idLen u8 | id | at f64 ----
// ---- kind 4, dead: idLen u8 | id | reason (rest) ----
// ---- kind 5, requeue: idLen u8 | id ----
// ---- kind 7, started: idLen u8 | id ----
// ---- kind 18, snapshot acked: idLen u8 | id | at f64 | hasEntry u8 | entry (as kind 17) ----

/** Payload bytes of an id-keyed record: the id, `fixed` bytes of numbers, then `text` (if any). */
export const idRecordBytes = (idBytes: number, fixed: number, textBytes: number): number =>
  1 + idBytes + fixed + textBytes

/** Write the id of an id-keyed record at `at`; returns the offset after it. */
export const writeId = (buf: Buffer, at: number, id: string, idBytes: number): number => {
  if (idBytes > 255) throw new RangeError(`an id over 255 bytes (${idBytes})`)
  buf[at] = idBytes
  // As many UTF-8 bytes as UTF-16 units: every character is ASCII, its byte is its code (a loop is
  // about half the time of the native write for a UUID's 36 characters).
  if (idBytes === id.length && idBytes <= 64) {
    for (let i = 0; i < idBytes; i++) buf[at + 1 + i] = id.charCodeAt(i)
    return at + 1 + idBytes
  }
  // `idBytes` is the id's length in UTF-8, and the caller made room for it: no need for `write`'s checks.
  return 1 + at + (buf as unknown as RawBuffer).utf8Write(id, at + 1, idBytes)
}

/** An attempt record's fields. */
export interface AttemptFields {
  readonly id: string
  readonly attempts: number
  readonly nextAttemptAt: number
  readonly lastError: string
}

/** Read an attempt payload. */
export const readAttempt = (buf: Buffer, start: number, end: number): AttemptFields => {
  const c = new Cursor(buf, start, end)
  const id = c.text(c.u8())
  const attempts = c.u32()
  const nextAttemptAt = c.f64()
  return { id, attempts, nextAttemptAt, lastError: c.rest() }
}

/** An ack record's fields: the id and when (starts the dedupe window). */
export const readAck = (buf: Buffer, start: number, end: number): { readonly id: string; readonly at: number } => {
  const c = new Cursor(buf, start, end)
  const id = c.text(c.u8())
  const at = c.f64()
  if (c.at !== end) throw new BadPayload("bytes after an ack record's fields")
  return { id, at }
}

/** A dead record's fields: the id and the reason (becomes `lastError`). */
export const readDead = (buf: Buffer, start: number, end: number): { readonly id: string; readonly reason: string } => {
  const c = new Cursor(buf, start, end)
  const id = c.text(c.u8())
  return { id, reason: c.rest() }
}

/** The id of a record that holds only an id (requeue, started). */
export const readIdOnly = (buf: Buffer, start: number, end: number, what: string): string => {
  const c = new Cursor(buf, start, end)
  const id = c.text(c.u8())
  if (c.at !== end) throw new BadPayload(`bytes after a ${what} record's id`)
  return id
}

/** A requeue record's id. */
export const readRequeue = (buf: Buffer, start: number, end: number): string => readIdOnly(buf, start, end, "requeue")

/** A snapshot acked record's fields. */
export interface AckedFields {
  readonly id: string
  readonly at: number
  readonly entry: EntryData | undefined
}

/** Payload bytes of a snapshot acked record. */
export const ackedBytes = (id: string, entry: EntryData | undefined): number =>
  1 + utf8Bytes(id) + 8 + 1 + (entry === undefined ? 0 : entryBytes(entry))

/** Write a snapshot acked payload at `at`; returns its end. */
export const writeAcked = (buf: Buffer, at: number, id: string, time: number, entry: EntryData | undefined): number => {
  at = writeId(buf, at, id, utf8Bytes(id))
  buf.writeDoubleBE(time, at)
  buf[at + 8] = entry === undefined ? 0 : 1
  at += 9
  return entry === undefined ? at : writeEntry(buf, at, entry)
}

/** Read a snapshot acked payload. */
export const readAcked = (buf: Buffer, start: number, end: number): AckedFields => {
  const c = new Cursor(buf, start, end)
  const id = c.text(c.u8())
  const at = c.f64()
  const has = c.u8()
  if (has > 1) throw new BadPayload("an acked record flag that is neither 0 nor 1")
  if (has === 0) {
    if (c.at !== end) throw new BadPayload("bytes after an acked record's fields")
    return { id, at, entry: undefined }
  }
  return { id, at, entry: readEntryAt(c) }
}
