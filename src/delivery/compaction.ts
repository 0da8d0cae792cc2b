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
import type { AckedCopy } from "./ackedWindow.js"
import { ackedBytes, entryBytes, type EntryData, writeAcked, writeEntry } from "./payload.js"
import { encode, HEADER_BYTES, Kind, seal } from "./record.js"
import { FILE_MODE, fsyncDir, segmentName } from "./segment.js"

/** Points where a test may crash the process (`hooks.step`). */
export type CompactionStep =
  | "checkpointed"
  | "temp-written"
  | "temp-synced"
  | "renamed"
  | "dir-synced"
  | "removed-one"
  | "removed-all"

/** Test hooks: `step` is called after each step, in order. */
export interface CompactionHooks {
  readonly step?: (step: CompactionStep) => void
}

/** The live state captured at the checkpoint (copies: the live entries go on changing). */
export interface Captured {
  readonly entries: ReadonlyArray<EntryData>
  readonly acked: AckedCopy
  readonly nextSeq: number
  readonly nextLsn: number
}

const CHUNK = 1 << 20

const writeAll = async (fh: fs.promises.FileHandle, bufs: Array<Buffer>, size: number): Promise<void> => {
  if (bufs.length === 0) return
  const one = Buffer.concat(bufs, size)
  let off = 0
  while (off < one.length) {
    const { bytesWritten } = await fh.write(one, off, one.length - off)
    off += bytesWritten
  }
}

/** Write snapshot `number` from `captured`; returns its size. Steps 2 and 3. */
export const writeSnapshot = async (
  dir: string,
  number: number,
  captured: Captured,
  sync: boolean,
  hooks: CompactionHooks,
  beforeRename: () => void = () => {}
): Promise<number> => {
  const final = join(dir, segmentName(number, "snap"))
  const temp = `${final}.tmp`
  const fh = await fs.promises.open(
    temp,
    fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_WRONLY,
    FILE_MODE
  )
  let total = 0
  try {
    let lsn = 0
    let bufs: Array<Buffer> = []
    let size = 0
    const add = async (buf: Buffer): Promise<void> => {
      bufs.push(buf)
      size += buf.length
      if (size >= CHUNK) {
        await writeAll(fh, bufs, size)
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
    await put(Kind.snapshotBegin, {
      nextSeq: captured.nextSeq,
      nextLsn: captured.nextLsn,
      entries: captured.entries.length,
      acked: captured.acked.size
    })
    for (const e of captured.entries) {
      await putBinary(Kind.snapshotEntry, entryBytes(e), (buf, at) => writeEntry(buf, at, e))
    }
    for (const [id, time, entry] of captured.acked) {
      await putBinary(Kind.snapshotAcked, ackedBytes(id, entry), (buf, at) => writeAcked(buf, at, id, time, entry))
    }
    await put(Kind.snapshotEnd, { records: lsn + 1 })
    await writeAll(fh, bufs, size)
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
  return total
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
