/**
 * Whether the log still holds its directory: the `LOCK` it took must still be there, the very file
 * (device and inode). When the directory is deleted under a running log (an `rm -rf` of the state
 * folder, a tmp cleaner), its open files go on taking writes that no restart will find; when only
 * `LOCK` is removed or replaced, another process may open the directory and write it too. Either
 * way the log must stop acknowledging writes as durable. Checked at most once per `LOCK_CHECK_MS`
 * of the calls' clock (the lock file opened and read; the first call after an idle spell checks
 * before it writes), so writes acknowledged in the second before a check are lost with the folder.
 */
import * as fs from "node:fs"
import { DeliveryLogError } from "./errors.js"

/** How often, at most, a call checks the lock (ms of the calls' clock). */
export const LOCK_CHECK_MS = 1_000

/** The lock file as it is now (device, inode and text), or undefined when it is not there or not readable. */
const identity = (path: string): { readonly dev: number; readonly ino: number; readonly text: string } | undefined => {
  let fd: number
  try {
    fd = fs.openSync(path, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW)
  } catch {
    return undefined
  }
  try {
    const st = fs.fstatSync(fd)
    const buf = Buffer.alloc(256)
    const n = fs.readSync(fd, buf, 0, buf.length, 0)
    return { dev: st.dev, ino: st.ino, text: buf.toString("latin1", 0, n) }
  } catch {
    return undefined
  } finally {
    fs.closeSync(fd)
  }
}

/** The error every call fails with once the directory (or its lock) was taken from under the log. */
export const lockLostError = (dir: string, dirGone: boolean): DeliveryLogError =>
  new DeliveryLogError({
    reason: "io",
    message: dirGone
      ? `The delivery log's folder ${dir} was deleted or moved while the log was open: what it held is no longer there, and nothing written now would be found after a restart; writes are refused until the folder is there again (the log then re-opens what it finds in it, nothing if it was made anew) or the process restarts`
      : `The delivery log's lock file in ${dir} was removed or replaced while the log was open (another process may now write the folder); writes are refused until the log takes the lock again`,
    path: dir
  })

export class LockWatch {
  private checkedAt = Number.NEGATIVE_INFINITY
  private readonly held: ReturnType<typeof identity>
  /** Set once the lock was found gone: the core takes no more writes. */
  lost: DeliveryLogError | undefined

  constructor(private readonly dir: string, private readonly lockPath: string) {
    this.held = identity(lockPath)
  }

  /**
   * At a call made at `now`: `true` when this check found the lock gone (the first time only).
   * Cheap between checks: a comparison.
   */
  check(now: number): boolean {
    if (this.lost !== undefined) return false
    // A clock that went back checks again too.
    if (now - this.checkedAt < LOCK_CHECK_MS && now >= this.checkedAt) return false
    this.checkedAt = now
    // A lock that could not be read at open (a test's stand-in) is not watched.
    if (this.held === undefined) return false
    const seen = identity(this.lockPath)
    // A removed file's inode number is soon reused (by the very file that replaces it): the text too.
    if (
      seen !== undefined && seen.ino === this.held.ino && seen.dev === this.held.dev && seen.text === this.held.text
    ) {
      return false
    }
    this.lost = lockLostError(this.dir, !fs.existsSync(this.dir))
    return true
  }
}
