/**
 * Channels: where an agent's replies go. The delivery queue hands every entry of the delivery log
 * to the agent's channel; a channel that fails with `DeliveryFailure` gets the entry again later
 * (or, when the failure is `permanent`, the entry goes to the dead letters).
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { DeliveryFailure } from "../delivery/index.js"
import type { DeliveryEntry } from "../delivery/index.js"

/**
 * Where replies go. `name` is written into every outbound message (`message.channel`), so the
 * log knows which channel an entry belongs to. `send` must be safe to call again with the same
 * entry (delivery is at least once; `entry.id` is stable, so a channel may drop a duplicate).
 */
export interface Channel {
  readonly name: string
  readonly send: (entry: DeliveryEntry) => Effect.Effect<void, DeliveryFailure>
}

/** The body of every reply an agent puts in the delivery log. */
export interface ReplyBody {
  /** The session whose turn produced the reply (`cron:<job>` for a cron run, `heartbeat` for a heartbeat). */
  readonly session: string
  readonly kind: "user" | "heartbeat" | "cron"
  readonly text: string
  /** How many user messages the turn answered (1 for heartbeat and cron runs). */
  readonly messages: number
  /** The cron job's name, for a cron run. */
  readonly job?: string
  /** The turn's number within its session. */
  readonly turn?: number
  /** A reply too large for one log record is several entries: this one is part `part` (from 1) of `parts`. */
  readonly part?: number
  readonly parts?: number
}

/** Reads a `ReplyBody` out of an entry; `undefined` when the entry was not written by an agent. */
export const replyOf = (entry: DeliveryEntry): ReplyBody | undefined => {
  const body = entry.message.body
  if (typeof body !== "object" || body === null) return undefined
  const b = body as Record<string, unknown>
  if (typeof b.session !== "string" || typeof b.text !== "string") return undefined
  const kind = b.kind === "heartbeat" || b.kind === "cron" ? b.kind : "user"
  const messages = typeof b.messages === "number" ? b.messages : 1
  return {
    session: b.session,
    kind,
    text: b.text,
    messages,
    ...(typeof b.job === "string" ? { job: b.job } : {}),
    ...(typeof b.turn === "number" ? { turn: b.turn } : {}),
    ...(typeof b.part === "number" && typeof b.parts === "number" ? { part: b.part, parts: b.parts } : {})
  }
}

const defaultConsoleFormat = (entry: DeliveryEntry): string => {
  const reply = replyOf(entry)
  return reply === undefined
    ? `[${entry.message.to}] ${JSON.stringify(entry.message.body)}`
    : `[${entry.message.to}] ${reply.text}`
}

/**
 * A channel that writes one line per delivered entry (by default to standard output, as
 * `[recipient] text`). A failing `write` is a retryable `DeliveryFailure`.
 */
export const ConsoleChannel = (options?: {
  readonly name?: string
  readonly write?: (line: string) => void
  readonly format?: (entry: DeliveryEntry) => string
}): Channel => {
  const write = options?.write ?? ((line: string) => void process.stdout.write(line + "\n"))
  const format = options?.format ?? defaultConsoleFormat
  return {
    name: options?.name ?? "console",
    send: (entry) =>
      Effect.try({
        try: () => write(format(entry)),
        catch: (cause) => new DeliveryFailure({ message: `console write failed: ${errorText(cause)}` })
      })
  }
}

const defaultFileRecord = (entry: DeliveryEntry): unknown => ({
  id: entry.id,
  to: entry.message.to,
  body: entry.message.body
})

/**
 * A channel that appends one JSON line per delivered entry to `path` (created with mode 0600, its
 * folder with 0700). Each line is written by one `write` call on a file opened for appending, so
 * lines never interleave. With `sync: true` every line is on disk (fdatasync) before `send`
 * succeeds. The line is `format(entry)` (default `{ id, to, body }`). The file is closed with the Scope.
 */
export const FileChannel = (options: {
  readonly path: string
  readonly name?: string
  readonly sync?: boolean
  readonly format?: (entry: DeliveryEntry) => unknown
}): Effect.Effect<Channel, DeliveryFailure, Scope.Scope> =>
  Effect.gen(function*() {
    const file = path.resolve(options.path)
    const format = options.format ?? defaultFileRecord
    const fd = yield* Effect.acquireRelease(
      Effect.try({
        try: () => {
          fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
          return fs.openSync(file, "a", 0o600)
        },
        catch: (cause) =>
          new DeliveryFailure({ message: `cannot open ${file} for appending: ${errorText(cause)}`, permanent: true })
      }),
      (fd) => Effect.sync(() => fs.closeSync(fd))
    )
    const send = (entry: DeliveryEntry): Effect.Effect<void, DeliveryFailure> =>
      Effect.callback<void, DeliveryFailure>((resume) => {
        let line: Buffer
        try {
          line = Buffer.from(JSON.stringify(format(entry)) + "\n", "utf8")
        } catch (cause) {
          resume(
            Effect.fail(
              new DeliveryFailure({ message: `cannot encode entry ${entry.id}: ${errorText(cause)}`, permanent: true })
            )
          )
          return
        }
        fs.write(fd, line, 0, line.length, null, (error, written) => {
          if (error !== null) {
            resume(Effect.fail(new DeliveryFailure({ message: `append to ${file} failed: ${error.message}` })))
          } else if (written !== line.length) {
            resume(
              Effect.fail(
                new DeliveryFailure({ message: `short append to ${file}: ${written} of ${line.length} bytes` })
              )
            )
          } else if (options.sync === true) {
            fs.fdatasync(fd, (syncError) =>
              resume(
                syncError === null
                  ? Effect.void
                  : Effect.fail(new DeliveryFailure({ message: `sync of ${file} failed: ${syncError.message}` }))
              ))
          } else {
            resume(Effect.void)
          }
        })
      })
    return { name: options.name ?? "file", send } satisfies Channel
  })

const errorText = (cause: unknown): string => cause instanceof Error ? cause.message : String(cause)
