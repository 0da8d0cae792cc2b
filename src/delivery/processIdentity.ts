/**
 * Who holds a lock, in a form that a later process can check: the pid, the process's start time
 * (field 22 of `/proc/<pid>/stat`, clock ticks since boot) and the boot id
 * (`/proc/sys/kernel/random/boot_id`). A pid alone is not enough: a SIGKILLed holder under a parent
 * that does not reap stays a zombie that `kill(pid, 0)` still finds, and in a fresh container the
 * pid is soon reused by an unrelated process. Where `/proc` is missing (macOS), only the pid is
 * kept and checked with `kill(pid, 0)`.
 */
import * as fs from "node:fs"

/** A holder as written in a lock file: `<pid> <start> <boot id>` (`-` for a part not known). */
export interface Identity {
  readonly pid: number
  readonly start?: string
  readonly boot?: string
}

let hasProc: boolean | undefined
let bootId: string | undefined | null = null

const procMounted = (): boolean => (hasProc ??= fs.existsSync("/proc/self/stat"))

const readBootId = (): string | undefined => {
  if (bootId === null) {
    try {
      bootId = fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim() || undefined
    } catch {
      bootId = undefined
    }
  }
  return bootId
}

/** State and start time of a process, `"gone"` when /proc has no such pid. */
const procStat = (pid: number): { readonly state: string; readonly start: string } | "gone" => {
  let text: string
  try {
    text = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code
    if (code === "ENOENT" || code === "ESRCH") return "gone"
    throw e
  }
  // "pid (comm) state ppid …": comm may hold spaces and parentheses, so split after the last ")".
  const fields = text.slice(text.lastIndexOf(")") + 2).split(" ")
  // fields[0] is field 3 (state); field 22 (starttime) is fields[19].
  return { state: fields[0] ?? "?", start: fields[19] ?? "?" }
}

const killSaysAlive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return (e as NodeJS.ErrnoException).code !== "ESRCH"
  }
}

let self: Identity | undefined

/** This process. */
export const selfIdentity = (): Identity => {
  if (self === undefined) {
    const stat = procMounted() ? procStat(process.pid) : "gone"
    const boot = procMounted() ? readBootId() : undefined
    self = {
      pid: process.pid,
      ...(stat !== "gone" ? { start: stat.start } : {}),
      ...(boot !== undefined ? { boot } : {})
    }
  }
  return self
}

/** The text a lock file holds for `id`. */
export const formatIdentity = (id: Identity): string => `${id.pid} ${id.start ?? "-"} ${id.boot ?? "-"}\n`

/** The identity in a lock file's text (also the old format, a bare pid), or undefined for anything else. */
export const parseIdentity = (text: string): Identity | undefined => {
  const m = /^(\d+)(?:[ \t]+(\d+|-)[ \t]+([0-9a-f-]+|-))?\s*$/.exec(text)
  if (m === null) return undefined
  const pid = Number(m[1])
  if (!Number.isSafeInteger(pid) || pid <= 0) return undefined
  return {
    pid,
    ...(m[2] !== undefined && m[2] !== "-" ? { start: m[2] } : {}),
    ...(m[3] !== undefined && m[3] !== "-" ? { boot: m[3] } : {})
  }
}

/**
 * Whether the holder `id` still runs. With /proc: a different boot id is a holder from before a
 * reboot; a missing pid, a zombie (state Z or X) or a process started at another time is not the
 * holder. A lock in the old format (no start time) falls back to `writtenAtMs`: a process that
 * started after the lock was written cannot have written it. Without /proc: `kill(pid, 0)`.
 */
export const isRunning = (id: Identity, writtenAtMs?: number): boolean => {
  if (!procMounted()) return killSaysAlive(id.pid)
  const boot = readBootId()
  if (id.boot !== undefined && boot !== undefined && id.boot !== boot) return false
  const stat = procStat(id.pid)
  // Not in /proc but kill finds it: /proc hides other users' processes (hidepid); trust kill.
  if (stat === "gone") return killSaysAlive(id.pid)
  if (stat.state === "Z" || stat.state === "X" || stat.state === "x") return false
  if (id.start !== undefined) return stat.start === id.start
  return writtenAtMs === undefined || !startedAfter(stat.start, writtenAtMs)
}

/** USER_HZ: the unit of /proc start times, 100 on every Linux architecture Node runs on. */
const TICKS_PER_SECOND = 100

let bootTimeMs: number | undefined | null = null

const readBootTimeMs = (): number | undefined => {
  if (bootTimeMs === null) {
    try {
      const m = /^btime (\d+)$/m.exec(fs.readFileSync("/proc/stat", "utf8"))
      bootTimeMs = m === null ? undefined : Number(m[1]) * 1000
    } catch {
      bootTimeMs = undefined
    }
  }
  return bootTimeMs
}

/** Whether a process of start time `start` (ticks since boot) began after `atMs` (with 2 s of slack). */
const startedAfter = (start: string, atMs: number): boolean => {
  const boot = readBootTimeMs()
  const ticks = Number(start)
  if (boot === undefined || !Number.isFinite(ticks)) return false
  return boot + (ticks / TICKS_PER_SECOND) * 1000 > atMs + 2_000
}
