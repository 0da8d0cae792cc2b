/**
 * Opening a log directory for the core: create it, take the lock (or keep one this process holds),
 * recover and finish recovery, and open the segment to append to (or create one). The core is built
 * by the caller's `build`, inside the same guard: any failure releases a lock taken here and becomes
 * a `DeliveryLogError` (`corrupt` naming the file, `io`, `locked`).
 */
import * as fs from "node:fs"
import { join } from "node:path"
import type { CompactionHooks } from "./compaction.js"
import { DeliveryLogError } from "./errors.js"
import { describeFsError, fsErrorPath, makeDirectory } from "./fsError.js"
import type { ActiveSegment } from "./groupCommit.js"
import { acquireLock, releaseLock } from "./lockfile.js"
import { CorruptLog, finishRecovery, type KeptSegment, recover, type Recovered } from "./recovery.js"
import { createSegment, DIR_MODE, fileCode, segmentFlags, segmentName } from "./segment.js"
import type { ResolvedOptions } from "./validate.js"

/** What opening found, for the caller to log. */
export interface OpenNotes {
  readonly truncated?: { readonly path: string; readonly offset: number; readonly why: string }
  readonly tookOverLockFrom?: number
  /** The directory had segments but no MANIFEST (an older version): one was written. */
  readonly wroteManifest?: boolean
  /** Recovery started from the CHECKPOINT (it matched every file it covers). */
  readonly fromCheckpoint?: boolean
}

/** The directory, recovered, as the core starts from it. */
export interface OpenedFiles {
  readonly lockPath: string
  readonly recovered: Recovered
  /** Every file the log keeps, the active segment included. */
  readonly segments: Map<number, KeptSegment>
  /** The segment to append to, open with `segmentFlags`. */
  readonly active: ActiveSegment
  readonly notes: OpenNotes
}

/**
 * Open `o.dir` (`heldLock`: the path of a lock this process holds, for a re-open) and return what
 * `build` makes of it. Throws `DeliveryLogError`.
 */
export const openLogFiles = <A>(
  o: ResolvedOptions,
  hooks: CompactionHooks,
  readSlack: number,
  heldLock: string | undefined,
  build: (files: OpenedFiles) => A
): A => {
  const io = (e: unknown, what: string): DeliveryLogError =>
    new DeliveryLogError({
      reason: "io",
      message: `Could not ${what}: ${describeFsError(e)}`,
      path: fsErrorPath(e) ?? o.dir
    })
  try {
    makeDirectory(o.dir, DIR_MODE)
  } catch (e) {
    throw io(e, "create the log directory")
  }
  let lock: ReturnType<typeof acquireLock>
  try {
    lock = heldLock !== undefined ? { _tag: "Acquired", path: heldLock } : acquireLock(o.dir)
  } catch (e) {
    throw e instanceof DeliveryLogError ? e : io(e, "take the log's lock")
  }
  if (lock._tag === "Held") {
    throw new DeliveryLogError({
      reason: "locked",
      message: `The delivery log is open in process ${
        lock.pid ?? "(unknown)"
      }; close it there first (only one process may write a log directory)`,
      path: lock.path
    })
  }
  try {
    const r = recover(o.dir, o.maxRecordBytes + readSlack, undefined, hooks.digest)
    finishRecovery(o.dir, r, o.sync)
    const segments = new Map<number, KeptSegment>()
    for (const s of r.segments) segments.set(s.number, s)
    let active: ActiveSegment
    if (r.active !== undefined) {
      const fd = fs.openSync(join(o.dir, segmentName(r.active.number, "log")), segmentFlags(o.sync))
      // Recovery cut the file to its records (a zero-filled tail included).
      active = { number: r.active.number, fd, size: r.active.bytes, length: fs.fstatSync(fd).size }
    } else {
      const number = r.highestNumber + 1
      active = { number, fd: createSegment(o.dir, number, o.sync).fd, size: 0, length: 0 }
      segments.set(number, { number, kind: "log", bytes: 0, crc: 0, crcTo: 0 })
      r.state.addresses.add(fileCode(number, "log"), r.nextAddress)
    }
    const notes: OpenNotes = {
      // Zero-filled space the writer had not reached is no torn write: cut without a note.
      ...(r.truncate !== undefined && r.truncate.zeros !== true
        ? { truncated: { path: r.truncate.path, offset: r.truncate.offset, why: r.truncate.why } }
        : {}),
      ...(lock.tookOverFrom !== undefined ? { tookOverLockFrom: lock.tookOverFrom } : {}),
      ...(r.noManifest ? { wroteManifest: true } : {}),
      ...(r.fromCheckpoint ? { fromCheckpoint: true } : {})
    }
    return build({ lockPath: lock.path, recovered: r, segments, active, notes })
  } catch (e) {
    if (heldLock === undefined) releaseLock(lock.path)
    if (e instanceof DeliveryLogError) throw e
    if (e instanceof CorruptLog) {
      throw new DeliveryLogError({
        reason: "corrupt",
        message:
          `The delivery log is corrupt: ${e.message}; nothing was changed on disk (restore the file from a backup, or move it away to start without it)`,
        path: e.path
      })
    }
    throw io(e, "recover the log")
  }
}
