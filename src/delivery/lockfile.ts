/**
 * The single-writer lock of a log directory: a file `LOCK` naming its holder by a verified identity
 * (pid, process start time, boot id: see processIdentity.ts). A lock whose holder no longer runs
 * (gone, a zombie, a reused pid, a reboot) is taken over.
 *
 * Every lock file appears whole: its text is written to a private temporary file that is
 * then hard-linked to its name, which fails if the name exists (as O_EXCL would). So a full disk
 * leaves no empty `LOCK`, and a reader never sees a half-written one.
 *
 * Taking over is race-free: only the holder of `LOCK.takeover` (itself taken with link) may remove a
 * stale `LOCK`, and it removes it by moving it aside and checking that it moved the very file (inode)
 * it judged stale. Two live processes never both hold the lock.
 */
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import { join } from "node:path"
import { DeliveryLogError } from "./errors.js"
import { describeFsError, fsErrorPath } from "./fsError.js"
import { formatIdentity, type Identity, isRunning, parseIdentity, selfIdentity } from "./processIdentity.js"
import { FILE_MODE } from "./segment.js"

/** The lock file's name inside the log directory. */
export const LOCK_NAME = "LOCK"

/** How taking the lock went. */
export type LockResult =
  | { readonly _tag: "Acquired"; readonly path: string; readonly tookOverFrom?: number }
  | { readonly _tag: "Held"; readonly path: string; readonly pid: number | undefined }

/**
 * A lock file as read: its inode and text (together they recognise it later: a removed file's inode
 * number is soon reused, by the very lock that replaces it), its holder if the text names one, its age.
 */
interface Seen {
  readonly ino: number
  readonly text: string
  readonly holder: Identity | undefined
  readonly mtimeMs: number
}

const lockError = (message: string, path: string): DeliveryLogError =>
  new DeliveryLogError({ reason: "io", message, path })

const unexpected = (e: unknown, what: string, path: string): DeliveryLogError =>
  e instanceof DeliveryLogError ? e : lockError(`Could not ${what}: ${describeFsError(e)}`, fsErrorPath(e) ?? path)

/** Read a lock file; `undefined` when it is not there. A directory in its place is an error. */
const see = (path: string): Seen | undefined => {
  let fd: number
  try {
    fd = fs.openSync(path, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW)
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code
    if (code === "ENOENT") return undefined
    if (code === "ELOOP") {
      throw lockError(`Expected ${path} to be a lock file, found a symbolic link; remove it and open again`, path)
    }
    throw e
  }
  try {
    const st = fs.fstatSync(fd)
    if (st.isDirectory()) {
      throw lockError(
        `Expected ${path} to be the log's lock file, found a directory; remove it (nothing was changed) and open again`,
        path
      )
    }
    const text = st.size > 256 ? "" : fs.readFileSync(fd, "utf8")
    return { ino: st.ino, text, holder: parseIdentity(text), mtimeMs: st.mtimeMs }
  } finally {
    fs.closeSync(fd)
  }
}

/** Whether the lock file seen names a live holder, or may still be being written by one (old format only). */
const held = (s: Seen): boolean =>
  s.holder !== undefined ? isRunning(s.holder, s.mtimeMs) : Date.now() - s.mtimeMs < 2_000

const tempName = (target: string): string => `${target}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`

/**
 * Create `target` holding `text`, whole, only if it does not exist: its inode, or `undefined` when
 * `target` exists. On any failure (a full disk) nothing is left behind.
 */
const createWhole = (target: string, text: string): number | undefined => {
  const tmp = tempName(target)
  try {
    return createVia(tmp, target, text)
  } catch (e) {
    // Name the lock, not the temporary file.
    const err = e as NodeJS.ErrnoException
    if (err?.path === tmp) err.path = target
    throw e
  }
}

const createVia = (tmp: string, target: string, text: string): number | undefined => {
  const fd = fs.openSync(tmp, fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_WRONLY, FILE_MODE)
  let ino: number
  try {
    try {
      // Not synced: a power cut that loses the text also ended its holder (an empty lock is stale).
      fs.writeSync(fd, text)
      ino = fs.fstatSync(fd).ino
    } finally {
      fs.closeSync(fd)
    }
    try {
      fs.linkSync(tmp, target)
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "EEXIST") return undefined
      throw e
    }
  } finally {
    fs.rmSync(tmp, { force: true })
  }
  return ino
}

/**
 * Remove `path` if it is still the file `seen`: moved aside first, so that what is removed is exactly
 * what was checked. A live file moved by mistake is put back. Whether it removed it.
 */
const removeIfSame = (path: string, seen: Seen): boolean => {
  const aside = tempName(path)
  try {
    fs.renameSync(path, aside)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return false
    throw e
  }
  if (isSame(aside, seen)) {
    fs.rmSync(aside, { force: true })
    return true
  }
  try {
    fs.linkSync(aside, path)
  } catch {
    // Another file took the name meanwhile; it stands.
  } finally {
    fs.rmSync(aside, { force: true })
  }
  return false
}

/** Whether `path` is (still) the file `seen` (same inode, same text). */
const isSame = (path: string, seen: Seen): boolean => {
  try {
    const now = see(path)
    return now !== undefined && now.ino === seen.ino && now.text === seen.text
  } catch {
    return false
  }
}

/** A lock this process created: its inode and its text. */
const ours = (ino: number, me: string): Seen => ({ ino, text: me, holder: undefined, mtimeMs: 0 })

type Takeover = { readonly _tag: "Took"; readonly ino: number } | { readonly _tag: "Retry" } | { readonly _tag: "Busy" }

const RETRY: Takeover = { _tag: "Retry" }
const BUSY: Takeover = { _tag: "Busy" }

/** Replace the stale lock `stale` at `path` by ours, under the takeover mutex. */
const takeOver = (path: string, stale: Seen, me: string): Takeover => {
  const mutex = `${path}.takeover`
  let mine = createWhole(mutex, me)
  if (mine === undefined) {
    const other = see(mutex)
    if (other === undefined) return RETRY
    if (held(other)) return BUSY
    // Its holder died inside a takeover (a window of microseconds): clear it as a stale lock.
    if (!removeIfSame(mutex, other)) return BUSY
    mine = createWhole(mutex, me)
    if (mine === undefined) return BUSY
  }
  try {
    const now = see(path)
    if (now !== undefined && (now.ino !== stale.ino || now.text !== stale.text)) return RETRY
    if (now !== undefined && !removeIfSame(path, stale)) return RETRY
    const ino = createWhole(path, me)
    // A newcomer created a lock in the instant the name was free: it holds it.
    return ino === undefined ? BUSY : { _tag: "Took", ino }
  } finally {
    if (isSame(mutex, ours(mine, me))) fs.rmSync(mutex, { force: true })
  }
}

const LEFTOVER = /^LOCK(?:\.takeover)?\.\d+\.[0-9a-f]{8}\.tmp$/

/** Temporary lock files of a process that died between writing and linking one (older than 10 s). */
const removeLeftovers = (dir: string): void => {
  try {
    for (const name of fs.readdirSync(dir)) {
      if (!LEFTOVER.test(name)) continue
      const p = join(dir, name)
      if (Date.now() - fs.statSync(p).mtimeMs > 10_000) fs.rmSync(p, { force: true })
    }
  } catch {
    // Only tidying: a leftover is harmless.
  }
}

/**
 * Take the lock of `dir`. Throws `DeliveryLogError` (`io`, naming the path) when the lock cannot be
 * read or written: a full disk, a read-only directory, a directory named `LOCK`.
 */
export const acquireLock = (dir: string): LockResult => {
  const path = join(dir, LOCK_NAME)
  const me = formatIdentity(selfIdentity())
  try {
    for (let round = 0; round < 4; round++) {
      const ino = createWhole(path, me)
      if (ino !== undefined) {
        if (!isSame(path, ours(ino, me))) continue
        removeLeftovers(dir)
        return { _tag: "Acquired", path }
      }
      const seen = see(path)
      if (seen === undefined) continue
      if (held(seen)) return { _tag: "Held", path, pid: seen.holder?.pid }
      const took = takeOver(path, seen, me)
      if (took._tag === "Busy") break
      // Re-verify: the lock is the file we linked.
      if (took._tag === "Took" && isSame(path, ours(took.ino, me))) {
        removeLeftovers(dir)
        return { _tag: "Acquired", path, ...(seen.holder !== undefined ? { tookOverFrom: seen.holder.pid } : {}) }
      }
    }
    return { _tag: "Held", path, pid: see(path)?.holder?.pid }
  } catch (e) {
    throw unexpected(e, "take the log's lock", path)
  }
}

/**
 * Remove the lock if it is still ours. Never throws: a failure (the directory became read-only,
 * unwritable or was replaced) is returned as a warning to log; the lock left behind names a process
 * that is gone once this one exits, so the next open takes it over.
 */
export const releaseLock = (path: string): string | undefined => {
  try {
    const seen = see(path)
    const me = selfIdentity()
    if (seen?.holder?.pid === me.pid && seen.holder.start === me.start) fs.rmSync(path, { force: true })
    return undefined
  } catch (e) {
    return `delivery log: could not release the lock ${path} (${
      e instanceof DeliveryLogError ? e.message : describeFsError(e)
    }); it is left behind and the next open takes it over once this process has exited`
  }
}
