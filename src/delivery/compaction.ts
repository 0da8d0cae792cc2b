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
import { ackedBytes, entryBytes, writeAcked, writeEntry } from "./payload.js"
import { encode, HEADER_BYTES, Kind, seal } from "./record.js"
import { RecordReader } from "./recordReader.js"
import { FILE_MODE, fsyncDir, segmentName } from "./segment.js"
import { formatUuid } from "./uuidWords.js"

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
  readonly entries: ReadonlyArray<EntryData>
  readonly acked: AckedCopy
  readonly nextSeq: number
  readonly nextLsn: number
}

const CHUNK = 1 << 20

/** Write `bufs` (`size` bytes in all) at the file's position; returns the CRC-32 carried on from `crc`. */
const writeAll = async (
  fh: fs.promises.FileHandle,
  bufs: Array<Buffer>,
  size: number,
  crc: number
): Promise<number> => {
  if (bufs.length === 0) return crc
  const one = Buffer.concat(bufs, size)
  let off = 0
  while (off < one.length) {
    const { bytesWritten } = await fh.write(one, off, one.length - off)
    off += bytesWritten
  }
  return crc32(one, crc)
}

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
  let total = 0
  let crc = 0
  const keyed = captured.acked.keyed
  const keyedAt = new Float64Array(keyed.count)
  const entriesAt = new Float64Array(captured.entries.length)
  try {
    let lsn = 0
    let bufs: Array<Buffer> = []
    let size = 0
    const add = async (buf: Buffer): Promise<void> => {
      bufs.push(buf)
      size += buf.length
      if (size >= CHUNK) {
        crc = await writeAll(fh, bufs, size, crc)
        total += size
        bufs = []
        size = 0
      }
    }
    const put = (kind: Kind, payload: unknown): Promise<void> => {
      const json = JSON.stringify(payload)
      return add(encode(++lsn, kind, json, Buffer.byteLength(json)))
    }
    const putBinary = (kind: Kind, payloadBytes: number, fill: (buf: Buffer, at: number) => number): Promise<void> => {
      const buf = Buffer.allocUnsafe(HEADER_BYTES + payloadBytes)
      if (fill(buf, HEADER_BYTES) !== buf.length) throw new Error("a snapshot payload of the wrong size")
      seal(buf, 0, ++lsn, kind, payloadBytes)
      return add(buf)
    }
    /** Where the next record starts in the file. */
    const here = (): number => total + size
    await put(Kind.snapshotBegin, {
      nextSeq: captured.nextSeq,
      nextLsn: captured.nextLsn,
      entries: captured.entries.length,
      acked: captured.acked.size,
      plain: captured.acked.plain
    })
    for (let i = 0; i < captured.entries.length; i++) {
      const e = captured.entries[i]!
      entriesAt[i] = here()
      await putBinary(Kind.snapshotEntry, entryBytes(e), (buf, at) => writeEntry(buf, at, e))
    }
    const putAcked = (id: string, time: number, entry: EntryData | undefined): Promise<void> =>
      putBinary(Kind.snapshotAcked, ackedBytes(id, entry), (buf, at) => writeAcked(buf, at, id, time, entry))
    for (const [id, time, entry] of captured.acked) await putAcked(id, time, entry)
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
    crc = await writeAll(fh, bufs, size, crc)
    total += size
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
