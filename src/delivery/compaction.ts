/**
 * Compaction: write the live state captured at a segment boundary as a snapshot, then remove the
 * segments it replaces. Every step is crash-safe (see docs/delivery-log-format.md):
 *
 * 1. the writer seals segment k at a record boundary, captures the state, and goes on in k+2;
 * 2. the snapshot is written to `<k+1>.snap.tmp` and synced (a crash here: recovery deletes the temp file);
 * 3. it is renamed to `<k+1>.snap` and the directory synced (from here recovery ignores every file
 *    numbered below k+1: the snapshot holds all they held that is still live);
 * 4. the files below k+1 are deleted and the directory synced.
 */
import * as fs from "node:fs"
import { join } from "node:path"
import { crc32 } from "node:zlib"
import { acked, type AckedCopy, WrongRecord } from "./ackedWindow.js"
import type { CheckpointStep } from "./checkpoint.js"
import type { EntryData } from "./entryData.js"
import type { KeyDigest } from "./keyDigest.js"
import type { EntryList } from "./liveEntries.js"
import { ackedBytes, entryBytes, writeAcked, writeEntry } from "./payload.js"
import { HEADER_BYTES, Kind, seal } from "./record.js"
import { RecordReader } from "./recordReader.js"
import { FILE_MODE, fsyncDir, segmentName } from "./segment.js"
import { UUID_CHARS } from "./uuid.js"
import { formatUuid, writeUuidWords } from "./uuidWords.js"

/** Points where a test may crash the process (`hooks.step`). */
export type CompactionStep =
  | "checkpointed"
  | "temp-written"
  | "temp-synced"
  | "renamed"
  | "dir-synced"
  | "removed-one"
  | "removed-all"

/** Test hooks: `step` is called after each step, in order; `digest` replaces the key digest (to force collisions). */
export interface CompactionHooks {
  readonly step?: (step: CompactionStep | CheckpointStep) => void
  readonly digest?: KeyDigest
}

/** The live state captured at the checkpoint (copies: the live entries go on changing). */
export interface Captured {
  readonly entries: EntryList
  readonly acked: AckedCopy
  readonly nextSeq: number
  readonly nextLsn: number
}

/** Bytes of the buffer a snapshot's records are framed in, written out each time it fills. */
const CHUNK = 1 << 20

/** Bytes of a plain acked id's record: the header, the id's length and 36 ASCII bytes, the time, the flag 0. */
const PLAIN_ACKED_PAYLOAD = 1 + UUID_CHARS + 8 + 1

/** A written snapshot: its size and CRC-32, and where the records of keyed ids and of the live entries went in it. */
export interface WrittenSnapshot {
  readonly size: number
  readonly crc: number
  /** Offset of the acked record of `captured.acked.keyed`'s i-th id. */
  readonly keyedAt: Float64Array
  /** Offset of the entry record of `captured.entries`' i-th (pending or dead) entry. */
  readonly entriesAt: Float64Array
}

/**
 * Write snapshot `number` of the log `o.dir` from `captured`: the keyed ring's entries are read back
 * from their records (still there: the files are removed only after this), each record's length
 * checked against `o.maxRecordBytes` + `slack`. Steps 2 and 3.
 */
export const writeSnapshot = async (
  o: { readonly dir: string; readonly sync: boolean; readonly maxRecordBytes: number },
  slack: number,
  number: number,
  captured: Captured,
  hooks: CompactionHooks,
  beforeRename: () => void = () => {}
): Promise<WrittenSnapshot> => {
  // The files below the snapshot are sealed: a window read once serves the records after it.
  const reader = new RecordReader(o.dir, o.maxRecordBytes + slack, 1 << 20, true)
  try {
    return await write(
      o.dir,
      number,
      captured,
      (code, offset) => reader.entryAt(code, offset),
      o.sync,
      hooks,
      beforeRename
    )
  } finally {
    reader.close()
  }
}

const write = async (
  dir: string,
  number: number,
  captured: Captured,
  read: (code: number, offset: number) => EntryData,
  sync: boolean,
  hooks: CompactionHooks,
  beforeRename: () => void
): Promise<WrittenSnapshot> => {
  const final = join(dir, segmentName(number, "snap"))
  const temp = `${final}.tmp`
  const fh = await fs.promises.open(
    temp,
    fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_WRONLY,
    FILE_MODE
  )
  /** Bytes written to the file so far, and their CRC-32. */
  let total = 0
  let crc = 0
  const keyed = captured.acked.keyed
  const keyedAt = new Float64Array(keyed.count)
  const entriesAt = new Float64Array(captured.entries.length)
  try {
    let lsn = 0
    // Records are framed in place in one buffer (no buffer, tuple or string per record), written out
    // whenever the next record would not fit.
    let chunk = Buffer.allocUnsafeSlow(CHUNK)
    let used = 0
    const flush = async (): Promise<void> => {
      let off = 0
      while (off < used) {
        const { bytesWritten } = await fh.write(chunk, off, used - off)
        off += bytesWritten
      }
      crc = crc32(chunk.subarray(0, used), crc)
      total += used
      used = 0
    }
    /** Room for a record of `bytes` at `chunk[used]`, once what is there was written out if it must. */
    const room = async (bytes: number): Promise<void> => {
      if (used + bytes <= chunk.length) return
      await flush()
      if (bytes > chunk.length) chunk = Buffer.allocUnsafeSlow(bytes)
    }
    const put = async (kind: Kind, payload: unknown): Promise<void> => {
      const json = JSON.stringify(payload)
      const payloadBytes = Buffer.byteLength(json)
      await room(HEADER_BYTES + payloadBytes)
      chunk.write(json, used + HEADER_BYTES, payloadBytes, "utf8")
      used = seal(chunk, used, ++lsn, kind, payloadBytes)
    }
    const putBinary = async (
      kind: Kind,
      payloadBytes: number,
      fill: (buf: Buffer, at: number) => number
    ): Promise<void> => {
      await room(HEADER_BYTES + payloadBytes)
      if (fill(chunk, used + HEADER_BYTES) !== used + HEADER_BYTES + payloadBytes) {
        throw new Error("a snapshot payload of the wrong size")
      }
      used = seal(chunk, used, ++lsn, kind, payloadBytes)
    }
    /** Where the next record starts in the file. */
    const here = (): number => total + used
    await put(Kind.snapshotBegin, {
      nextSeq: captured.nextSeq,
      nextLsn: captured.nextLsn,
      entries: captured.entries.length,
      acked: captured.acked.size,
      plain: captured.acked.plain
    })
    for (let i = 0; i < captured.entries.length; i++) {
      const e = captured.entries.at(i)!
      entriesAt[i] = here()
      await putBinary(Kind.snapshotEntry, entryBytes(e), (buf, at) => writeEntry(buf, at, e))
    }
    const putAcked = (id: string, time: number, entry: EntryData | undefined): Promise<void> =>
      putBinary(Kind.snapshotAcked, ackedBytes(id, entry), (buf, at) => writeAcked(buf, at, id, time, entry))
    for (const [id, time, entry] of captured.acked.kept) await putAcked(id, time, entry)
    // The plain ids, straight from their 128 bits: the bytes `putAcked(formatUuid(...), time, undefined)` writes.
    const plain = captured.acked.plainIds
    const w = plain.words
    let p = 0
    for (let r = 0; r < plain.runs.at.length; r++) {
      const time = plain.runs.at[r]!
      for (let n = 0; n < plain.runs.count[r]!; n++, p++) {
        if (used + HEADER_BYTES + PLAIN_ACKED_PAYLOAD > chunk.length) await flush()
        const at = used + HEADER_BYTES
        chunk[at] = UUID_CHARS
        writeUuidWords(chunk, at + 1, w[4 * p]!, w[4 * p + 1]!, w[4 * p + 2]!, w[4 * p + 3]!)
        chunk.writeDoubleBE(time, at + 1 + UUID_CHARS)
        chunk[at + 1 + UUID_CHARS + 8] = 0
        used = seal(chunk, used, ++lsn, Kind.snapshotAcked, PLAIN_ACKED_PAYLOAD)
      }
    }
    const { words, runs } = keyed
    let i = 0
    for (let r = 0; r < runs.at.length; r++) {
      for (let n = 0; n < runs.count[r]!; n++, i++) {
        const id = formatUuid(words[4 * i]!, words[4 * i + 1]!, words[4 * i + 2]!, words[4 * i + 3]!)
        const stored = read(keyed.files[i]!, keyed.offsets[i]!)
        if (stored.id !== id) throw new WrongRecord(`the record of acked entry ${id} holds entry ${stored.id}`)
        keyedAt[i] = here()
        await putAcked(id, runs.at[r]!, acked(stored, keyed.flags[i]!, keyed.bytes[i]!))
      }
    }
    await put(Kind.snapshotEnd, { records: lsn + 1 })
    await flush()
    hooks.step?.("temp-written")
    if (sync) await fh.sync()
    hooks.step?.("temp-synced")
  } finally {
    await fh.close()
  }
  beforeRename()
  await fs.promises.rename(temp, final)
  hooks.step?.("renamed")
  if (sync) fsyncDir(dir)
  hooks.step?.("dir-synced")
  return { size: total, crc, keyedAt, entriesAt }
}

/** Step 4: delete the files the snapshot replaces. */
export const removeReplaced = (
  dir: string,
  names: ReadonlyArray<string>,
  sync: boolean,
  hooks: CompactionHooks
): void => {
  names.forEach((name, i) => {
    fs.rmSync(join(dir, name), { force: true })
    if (i === 0) hooks.step?.("removed-one")
  })
  if (sync && names.length > 0) fsyncDir(dir)
  hooks.step?.("removed-all")
}
