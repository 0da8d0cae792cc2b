/**
 * The bot's own small state files under `<state-dir>/telegram/` (the poll offset, the progress of
 * long replies): JSON, mode 0600 in a 0700 folder, replaced atomically (temp file, fsync, rename,
 * fsync of the folder), so a crash leaves the old file or the new one, never a torn one.
 */
import { Data, Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"

/** A state file could not be read or written; `message` names the file and the system's reason. */
export class StateFileError extends Data.TaggedError("StateFileError")<{ readonly message: string }> {}

const reason = (cause: unknown) => (cause instanceof Error ? cause.message : String(cause))

/** The JSON in `file`, or `fallback` when there is no file. */
export const readState = <A>(file: string, fallback: A): Effect.Effect<A, StateFileError> =>
  Effect.try({
    try: () => (fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, "utf8")) as A) : fallback),
    catch: (cause) => new StateFileError({ message: `cannot read ${file}: ${reason(cause)}` })
  })

/** Replaces `file` with `value` as JSON, durably (see the module comment). */
export const writeState = (file: string, value: unknown): Effect.Effect<void, StateFileError> =>
  Effect.try({
    try: () => {
      const dir = path.dirname(file)
      fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
      const temp = `${file}.${process.pid}.tmp`
      const fd = fs.openSync(temp, "w", 0o600)
      try {
        fs.writeSync(fd, JSON.stringify(value))
        fs.fdatasyncSync(fd)
      } finally {
        fs.closeSync(fd)
      }
      fs.renameSync(temp, file)
      const dirFd = fs.openSync(dir, "r")
      try {
        fs.fsyncSync(dirFd)
      } finally {
        fs.closeSync(dirFd)
      }
    },
    catch: (cause) => new StateFileError({ message: `cannot write ${file}: ${reason(cause)}` })
  })
