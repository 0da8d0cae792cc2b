/**
 * The log's MANIFEST: which files must exist and how long each is at least, so that recovery refuses
 * a deleted or truncated segment and a snapshot it never wrote (see docs/delivery-log-format.md).
 * One small JSON file with its CRC-32, replaced atomically (temp file, fsync, rename, fsync dir) when a
 * segment is created or sealed, when a compaction installs a snapshot, on open and on close.
 */
import * as fs from "node:fs"
import { join } from "node:path"
import { crc32 } from "node:zlib"
import { FILE_MODE, fsyncDir } from "./segment.js"

export const MANIFEST = "MANIFEST"

/** What the MANIFEST records. */
export interface Manifest {
  /** The snapshot in force (files below it are superseded), if any. */
  readonly snapshot: number | null
  /** A snapshot a compaction is installing (written before its rename): accepted in place of `snapshot`. */
  readonly next: number | null
  /** The `.log` segments after the snapshot, in number order: `bytes` is the size each had when it was recorded (the last one may have grown since). */
  readonly segments: ReadonlyArray<{ readonly number: number; readonly bytes: number }>
}

/** The MANIFEST of `dir`; `undefined` when there is none; a string saying why it is unreadable. */
export const readManifest = (dir: string): Manifest | undefined | string => {
  let text: string
  try {
    text = fs.readFileSync(join(dir, MANIFEST), "utf8")
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined
    throw e
  }
  const nl = text.indexOf("\n")
  const json = nl < 0 ? text : text.slice(0, nl)
  const sum = nl < 0 ? "" : text.slice(nl + 1).trim()
  if (sum !== crc32(Buffer.from(json)).toString(16).padStart(8, "0")) return "a MANIFEST failing its CRC-32"
  try {
    const m = JSON.parse(json) as Manifest
    if (!Array.isArray(m.segments)) return "a MANIFEST without its segment list"
    return m
  } catch {
    return "a MANIFEST that is not JSON"
  }
}

/** Replace the MANIFEST of `dir` atomically (durably with `sync`). Throws the I/O error. */
export const writeManifest = (dir: string, m: Manifest, sync: boolean): void => {
  const json = JSON.stringify(m)
  const text = `${json}\n${crc32(Buffer.from(json)).toString(16).padStart(8, "0")}\n`
  const temp = join(dir, `${MANIFEST}.tmp`)
  const fd = fs.openSync(temp, fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_WRONLY, FILE_MODE)
  try {
    fs.writeSync(fd, text)
    if (sync) fs.fsyncSync(fd)
  } finally {
    fs.closeSync(fd)
  }
  fs.renameSync(temp, join(dir, MANIFEST))
  if (sync) fsyncDir(dir)
}
