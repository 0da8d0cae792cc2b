/**
 * The single-writer lock of a log directory: a file `LOCK` holding the holder's pid, created with
 * O_EXCL. A lock whose pid no longer runs (kill(pid, 0) fails with ESRCH) is taken over.
 */
import * as fs from "node:fs"
import { join } from "node:path"
import { FILE_MODE } from "./segment.js"

/** The lock file's name inside the log directory. */
export const LOCK_NAME = "LOCK"

/** How taking the lock went. */
export type LockResult =
  | { readonly _tag: "Acquired"; readonly path: string; readonly tookOverFrom?: number }
  | { readonly _tag: "Held"; readonly path: string; readonly pid: number | undefined }

const isAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code !== "ESRCH"
  }
}

const readPid = (path: string): number | undefined => {
  try {
    const m = /\d+/.exec(fs.readFileSync(path, "utf8"))
    const n = m === null ? Number.NaN : Number(m[0])
    return Number.isSafeInteger(n) && n > 0 ? n : undefined
  } catch {
    return undefined
  }
}

/** A lock file without a pid is a holder between its create and its write, unless it is old. */
const isFresh = (path: string): boolean => {
  try {
    return Date.now() - fs.statSync(path).mtimeMs < 2_000
  } catch {
    return false
  }
}

const create = (path: string): boolean => {
  let fd: number
  try {
    fd = fs.openSync(path, fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_WRONLY, FILE_MODE)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST") return false
    throw e
  }
  try {
    fs.writeSync(fd, `${process.pid}\n`)
    fs.fsyncSync(fd)
  } finally {
    fs.closeSync(fd)
  }
  return true
}

/**
 * Take the lock of `dir`. A stale lock (dead pid, or an unreadable file left by a crash between create
 * and write) is moved aside under a name of our own, checked to be the one we judged stale, and removed;
 * then the O_EXCL create is retried. Throws only on unexpected I/O errors.
 */
export const acquireLock = (dir: string): LockResult => {
  const path = join(dir, LOCK_NAME)
  for (let round = 0; round < 3; round++) {
    if (create(path)) return { _tag: "Acquired", path }
    const pid = readPid(path)
    if (pid !== undefined && isAlive(pid)) return { _tag: "Held", path, pid }
    if (pid === undefined && isFresh(path)) return { _tag: "Held", path, pid }
    // Stale: move it aside atomically, so that two processes cannot both remove a fresh lock.
    const aside = join(dir, `${LOCK_NAME}.stale.${process.pid}`)
    try {
      fs.renameSync(path, aside)
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") continue
      throw e
    }
    const moved = readPid(aside)
    if (moved !== pid && moved !== undefined && isAlive(moved)) {
      // We moved a live holder's fresh lock: put it back (link fails if yet another lock appeared).
      try {
        fs.linkSync(aside, path)
      } catch {
        // keep going: the holder still believes it holds the lock; the newcomer's lock stands.
      }
      fs.rmSync(aside, { force: true })
      return { _tag: "Held", path, pid: moved }
    }
    fs.rmSync(aside, { force: true })
    if (create(path)) return { _tag: "Acquired", path, ...(pid !== undefined ? { tookOverFrom: pid } : {}) }
  }
  return { _tag: "Held", path, pid: readPid(path) }
}

/** Remove the lock if it is still ours. */
export const releaseLock = (path: string): void => {
  if (readPid(path) === process.pid) fs.rmSync(path, { force: true })
}
