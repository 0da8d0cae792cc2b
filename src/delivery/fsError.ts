import * as fs from "node:fs"
import { dirname } from "node:path"

/** How a failed file-system call is told in an error text: the errno, what it means, and the path it concerned. */

const MEANING: Record<string, string> = {
  EROFS: "the file system is read-only",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  ENOSPC: "no space left on the device",
  EDQUOT: "disk quota exceeded",
  EEXIST: "it already exists",
  ENOTDIR: "a part of the path is not a directory",
  EISDIR: "it is a directory",
  ENOENT: "no such file or directory",
  EIO: "input/output error",
  EMFILE: "too many open files",
  ENAMETOOLONG: "the name is too long"
}

/** `EROFS (the file system is read-only) at /var/outbox/LOCK`; the text of a non-errno error as it is. */
export const describeFsError = (e: unknown): string => {
  const err = e as NodeJS.ErrnoException & { dest?: string }
  if (typeof err?.code !== "string") return String(e)
  const meaning = MEANING[err.code]
  const where = err.dest !== undefined && err.path !== undefined ? `${err.path} -> ${err.dest}` : err.path
  return `${err.code}${meaning !== undefined ? ` (${meaning})` : ""}${where !== undefined ? ` at ${where}` : ""}`
}

/** The path a failed file-system call concerned, if it says. */
export const fsErrorPath = (e: unknown): string | undefined => {
  const p = (e as NodeJS.ErrnoException)?.path
  return typeof p === "string" ? p : undefined
}

/**
 * `mkdir -p` with the real cause: a recursive mkdir that cannot create a parent (a read-only mount,
 * no permission) reports ENOENT; this makes the first missing directory alone to throw why.
 */
export const makeDirectory = (dir: string, mode: number): void => {
  try {
    fs.mkdirSync(dir, { recursive: true, mode })
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e
    let missing = dir
    while (!fs.existsSync(dirname(missing)) && dirname(missing) !== missing) missing = dirname(missing)
    fs.mkdirSync(missing, { mode })
    fs.mkdirSync(dir, { recursive: true, mode })
  }
}
