/**
 * The chatbot's state paths, checked before anything else runs (before the banner, before the
 * agent is loaded): `--state-dir` and `--outbox`. A bad path is one line naming it and the system's
 * reason (EROFS, EACCES, ENOTDIR, ...), and nothing is left written.
 *
 * Folders are created one level at a time: Node 20's recursive `mkdirSync` loops forever on some
 * paths (`/proc/forbidden`: `mkdir` says ENOENT, and it tries the parent again, and again).
 */
import * as fs from "node:fs"
import * as path from "node:path"

/** What the check needs of the options. */
export interface StatePaths {
  readonly stateDir: string
  readonly outbox?: string
}

const REASONS: Record<string, string> = {
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EROFS: "read-only file system",
  ENOSPC: "no space left on device",
  EDQUOT: "disk quota exceeded",
  ENAMETOOLONG: "name too long",
  ELOOP: "too many symbolic links",
  EISDIR: "is a folder",
  ENOTDIR: "not a folder"
}

/** A failed check: the flag, the path, what was tried, and the system's code with a few words. */
class PathProblem extends Error {
  constructor(readonly flag: string, readonly target: string, doing: string, code: string, why?: string) {
    super(`${flag} ${target}: ${doing}: ${code} (${why ?? REASONS[code] ?? "refused by the system"})`)
  }
}

const codeOf = (error: unknown): string =>
  typeof error === "object" && error !== null && typeof (error as { code?: unknown }).code === "string"
    ? (error as { code: string }).code
    : "EUNKNOWN"

/** `fs.statSync`, `undefined` when the path does not exist. */
const statOf = (flag: string, target: string, p: string): fs.Stats | undefined => {
  try {
    return fs.statSync(p)
  } catch (error) {
    const code = codeOf(error)
    if (code === "ENOENT") return undefined
    if (code === "ENOTDIR") {
      // Some parent is a file: name it.
      const file = firstFileAbove(p)
      throw new PathProblem(
        flag,
        target,
        `cannot use ${p}`,
        code,
        file === undefined ? undefined : `${file} is a file, not a folder`
      )
    }
    throw new PathProblem(flag, target, `cannot look at ${p}`, code)
  }
}

const firstFileAbove = (p: string): string | undefined => {
  for (let at = path.dirname(p); at !== path.dirname(at); at = path.dirname(at)) {
    try {
      if (!fs.statSync(at).isDirectory()) return at
    } catch {
      // go on up
    }
  }
  return undefined
}

/** The folders from the deepest existing ancestor (exclusive) down to `dir`, top first. */
const missingFolders = (flag: string, target: string, dir: string): Array<string> => {
  const missing: Array<string> = []
  let at = dir
  while (true) {
    const stat = statOf(flag, target, at)
    if (stat !== undefined) {
      if (!stat.isDirectory()) {
        throw new PathProblem(flag, target, `cannot use ${at}`, "ENOTDIR", `${at} is a file, not a folder`)
      }
      if (missing.length > 0) writable(flag, target, at, `cannot create ${missing[0]}`)
      return missing.reverse()
    }
    missing.push(at)
    const up = path.dirname(at)
    if (up === at) return missing.reverse()
    at = up
  }
}

const writable = (flag: string, target: string, p: string, doing: string): void => {
  try {
    fs.accessSync(p, fs.constants.W_OK | (fs.statSync(p).isDirectory() ? fs.constants.X_OK : 0))
  } catch (error) {
    throw new PathProblem(flag, target, doing, codeOf(error))
  }
}

/**
 * Checks `--state-dir` and `--outbox`, and creates what is missing (folders 0700, the outbox file
 * 0600). Returns the one-line error to print (and then nothing is left created), or `undefined`.
 */
export const prepareStatePaths = (options: StatePaths): string | undefined => {
  const created: Array<{ readonly path: string; readonly folder: boolean }> = []
  const stateDir = path.resolve(options.stateDir)
  const outbox = options.outbox === undefined ? undefined : path.resolve(options.outbox)
  try {
    // First everything that needs no write, so a bad outbox does not leave a new state folder behind.
    const stateMissing = missingFolders("--state-dir", options.stateDir, stateDir)
    if (stateMissing.length === 0) {
      writable("--state-dir", options.stateDir, stateDir, `cannot write in ${stateDir}`)
      for (const sub of ["deliveries", "sessions"]) {
        const p = path.join(stateDir, sub)
        const stat = statOf("--state-dir", options.stateDir, p)
        if (stat === undefined) continue
        if (!stat.isDirectory()) {
          throw new PathProblem(
            "--state-dir",
            options.stateDir,
            `cannot use ${p}`,
            "ENOTDIR",
            `${p} is a file, not a folder`
          )
        }
        writable("--state-dir", options.stateDir, p, `cannot write in ${p}`)
      }
    }
    let outboxMissing: Array<string> = []
    let outboxExists = false
    if (outbox !== undefined) {
      const stat = statOf("--outbox", options.outbox!, outbox)
      if (stat?.isDirectory() === true) {
        throw new PathProblem(
          "--outbox",
          options.outbox!,
          `cannot append to ${outbox}`,
          "EISDIR",
          `${outbox} is a folder, not a file`
        )
      }
      outboxExists = stat !== undefined
      if (outboxExists) writable("--outbox", options.outbox!, outbox, `cannot append to ${outbox}`)
      else outboxMissing = missingFolders("--outbox", options.outbox!, path.dirname(outbox))
    }
    // Then create, one level at a time; the system has the last word (e.g. nothing may be created under /proc).
    const mkdir = (flag: string, target: string, dir: string) => {
      try {
        fs.mkdirSync(dir, { mode: 0o700 })
      } catch (error) {
        const code = codeOf(error)
        throw new PathProblem(
          flag,
          target,
          `cannot create ${dir}`,
          code,
          code === "ENOENT" ? `the file system of ${path.dirname(dir)} does not take new folders` : undefined
        )
      }
      created.push({ path: dir, folder: true })
    }
    for (const dir of stateMissing) mkdir("--state-dir", options.stateDir, dir)
    if (outbox !== undefined) {
      // An outbox inside a new state folder: the folders the state step made are there now.
      const made = new Set(stateMissing)
      for (const dir of outboxMissing) if (!made.has(dir)) mkdir("--outbox", options.outbox!, dir)
      try {
        fs.closeSync(fs.openSync(outbox, "a", 0o600))
      } catch (error) {
        const code = codeOf(error)
        throw new PathProblem(
          "--outbox",
          options.outbox!,
          `cannot append to ${outbox}`,
          code,
          code === "ENOENT" ? `the file system of ${path.dirname(outbox)} does not take new files` : undefined
        )
      }
      if (!outboxExists) created.push({ path: outbox, folder: false })
    }
    return undefined
  } catch (error) {
    for (const entry of created.reverse()) {
      try {
        if (entry.folder) fs.rmdirSync(entry.path)
        else fs.unlinkSync(entry.path)
      } catch {
        // best effort: it was empty and ours
      }
    }
    if (error instanceof PathProblem) return `error: ${error.message}`
    return `error: cannot check the state paths: ${error instanceof Error ? error.message : String(error)}`
  }
}
