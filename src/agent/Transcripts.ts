/**
 * Per-session transcripts, persisted under the agent's state folder: the last `historyLimit`
 * turns of every session, the user messages accepted and not answered yet, and the last turn whose
 * reply may not have reached the delivery log. One JSON file per session (mode 0600, folder 0700),
 * replaced atomically (temp file, fsync, rename, fsync of the folder), so a crash at any point
 * leaves either the old or the new file, never a torn one.
 */
import { Data, Effect, Semaphore } from "effect"
import * as crypto from "node:crypto"
import * as fsSync from "node:fs"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import type { TranscriptMessage } from "./Model.js"

/** A transcript file could not be read or written. `path` names the file. */
export class TranscriptError extends Data.TaggedError("TranscriptError")<{
  readonly reason: "io" | "corrupt"
  readonly message: string
  readonly path: string
}> {}

/** What kind of turn produced a reply. */
export type TurnKind = "user" | "heartbeat" | "cron"

/** One answered turn: the user message(s) it answered and the reply. */
export interface TurnRecord {
  /** The turn's number within its session, from 1; never reused. */
  readonly n: number
  readonly kind: TurnKind
  readonly user: ReadonlyArray<string>
  readonly reply: string
  /** The recipient the reply was addressed to. */
  readonly to: string
  readonly job?: string
  /** Epoch ms. */
  readonly at: number
}

/** A user message that was accepted (it is on disk) and not answered yet. */
export interface PendingMessage {
  readonly seq: number
  readonly text: string
  readonly at: number
}

/** A session as stored. */
export interface SessionState {
  readonly session: string
  /** The last turns, oldest first, at most `historyLimit`. */
  readonly turns: ReadonlyArray<TurnRecord>
  /** Accepted user messages not answered yet, oldest first. */
  readonly pending: ReadonlyArray<PendingMessage>
  readonly nextSeq: number
  readonly nextTurn: number
  /** The last turn, while its reply may not be in the delivery log yet. */
  readonly unsent?: TurnRecord
  /** When a user message was last accepted (epoch ms, increasing within a process): the last active session survives a restart. */
  readonly activeAt?: number
}

/** The transcript store of one agent. Updates of one session are serialised; sessions are independent. */
export interface Transcripts {
  readonly historyLimit: number
  /**
   * The session as stored (an empty one when it has no file). `before` runs under the session's
   * lock just before the read: nothing can be accepted between it and the read.
   */
  readonly load: (session: string, before?: () => void) => Effect.Effect<SessionState, TranscriptError>
  /**
   * Journals user messages of a session before they are answered; returns them with their sequence
   * numbers. `after` runs under the session's lock once they are on disk.
   */
  readonly accept: (
    session: string,
    texts: ReadonlyArray<string>,
    after?: (added: ReadonlyArray<PendingMessage>) => void
  ) => Effect.Effect<ReadonlyArray<PendingMessage>, TranscriptError>
  /** Forgets accepted messages (by `seq`) that will not be answered. */
  readonly drop: (session: string, seqs: ReadonlyArray<number>) => Effect.Effect<void, TranscriptError>
  /**
   * Records an answered turn: drops the answered pending messages (by `seq`), appends the turn
   * (keeping the last `historyLimit`) and marks it unsent until `markSent`.
   */
  readonly record: (session: string, turn: {
    readonly kind: TurnKind
    readonly answered: ReadonlyArray<number>
    readonly user: ReadonlyArray<string>
    readonly reply: string
    readonly to: string
    readonly job?: string
  }) => Effect.Effect<TurnRecord, TranscriptError>
  /** The reply of turn `n` is in the delivery log. */
  readonly markSent: (session: string, n: number) => Effect.Effect<void, TranscriptError>
  /** Every session that has a file, in no particular order. */
  readonly sessions: Effect.Effect<ReadonlyArray<string>, TranscriptError>
  /**
   * Accepted, unanswered messages per session, as of the last read or write of each session (every
   * session is read on an agent's start). Sessions with none are absent.
   */
  readonly pendingCounts: () => ReadonlyMap<string, number>
}

/** The messages a model sees for a session: its stored turns, then the given new user messages. */
export const toMessages = (
  state: SessionState,
  newMessages: ReadonlyArray<string>
): Array<TranscriptMessage> => {
  const out: Array<TranscriptMessage> = []
  for (const turn of state.turns) {
    for (const content of turn.user) out.push({ role: "user", content })
    out.push({ role: "assistant", content: turn.reply })
  }
  for (const content of newMessages) out.push({ role: "user", content })
  return out
}

/** The file name of a session: readable when the id is short, a hash when it is long. */
export const sessionFileName = (session: string): string => {
  const encoded = encodeURIComponent(session).replace(/\./g, "%2E").replace(/\*/g, "%2A")
  return encoded.length <= 120
    ? `${encoded}.json`
    : `h-${crypto.createHash("sha256").update(session).digest("hex")}.json`
}

const emptyState = (session: string): SessionState => ({ session, turns: [], pending: [], nextSeq: 1, nextTurn: 1 })

let tempCounter = 0
/** The last `activeAt` given out in this process (kept increasing when two accepts share a millisecond). */
let lastStamp = 0

/**
 * Opens the transcript store in `dir` (created 0700 when missing). `historyLimit` (default 20) is
 * how many turns a session keeps; `fsync` (default true) syncs every file and the folder.
 */
export const make = (options: {
  readonly dir: string
  readonly historyLimit?: number
  readonly fsync?: boolean
}): Effect.Effect<Transcripts, TranscriptError> =>
  Effect.gen(function*() {
    const dir = path.resolve(options.dir)
    const historyLimit = options.historyLimit ?? 20
    const fsync = options.fsync ?? true
    yield* io(dir, "create", () => fs.mkdir(dir, { recursive: true, mode: 0o700 }))
    yield* sweepTemps(dir)

    // One permit per session; an entry lives only while someone holds or waits for it.
    const locks = new Map<string, { readonly sem: Semaphore.Semaphore; users: number }>()
    const locked = <A, E>(session: string, effect: Effect.Effect<A, E>): Effect.Effect<A, E> =>
      Effect.suspend(() => {
        let lock = locks.get(session)
        if (lock === undefined) {
          lock = { sem: Semaphore.makeUnsafe(1), users: 0 }
          locks.set(session, lock)
        }
        const held = lock
        held.users++
        return Semaphore.withPermits(held.sem, 1)(effect).pipe(
          Effect.ensuring(Effect.sync(() => {
            if (--held.users === 0 && locks.get(session) === held) locks.delete(session)
          }))
        )
      })

    const fileOf = (session: string) => path.join(dir, sessionFileName(session))

    const read = (session: string): Effect.Effect<SessionState, TranscriptError> => {
      const file = fileOf(session)
      return Effect.tryPromise({
        try: () => fs.readFile(file, "utf8"),
        catch: (cause) => cause
      }).pipe(
        Effect.matchEffect({
          onFailure: (cause) =>
            (cause as NodeJS.ErrnoException)?.code === "ENOENT"
              ? Effect.succeed(emptyState(session))
              : Effect.fail(
                new TranscriptError({ reason: "io", message: `cannot read ${file}: ${text(cause)}`, path: file })
              ),
          onSuccess: (content) => parse(session, file, content)
        }),
        Effect.map(counted)
      )
    }

    const counts = new Map<string, number>()
    const counted = (state: SessionState): SessionState => {
      if (state.pending.length === 0) counts.delete(state.session)
      else counts.set(state.session, state.pending.length)
      return state
    }

    const write = (state: SessionState): Effect.Effect<void, TranscriptError> => {
      const file = fileOf(state.session)
      return io(file, "write", async () => {
        const temp = `${file}.${process.pid}.${++tempCounter}.tmp`
        try {
          const handle = await fs.open(temp, "wx", 0o600)
          try {
            await handle.writeFile(JSON.stringify({ version: 1, ...state }), "utf8")
            if (fsync) await handle.datasync()
          } finally {
            await handle.close()
          }
          await fs.rename(temp, file)
        } catch (error) {
          // ENOSPC and friends: no temp file is left behind (the old file is untouched).
          await fs.rm(temp, { force: true }).catch(() => undefined)
          throw error
        }
        if (fsync) {
          const folder = await fs.open(dir, "r")
          try {
            await folder.sync()
          } finally {
            await folder.close()
          }
        }
      }).pipe(Effect.tap(() => Effect.sync(() => counted(state))))
    }

    /** Read, change, write atomically, then `after` (still under the lock). */
    const update = <A>(
      session: string,
      f: (state: SessionState) => readonly [SessionState, A],
      after?: (result: A) => void
    ) =>
      locked(
        session,
        Effect.flatMap(read(session), (state) => {
          const [next, result] = f(state)
          return Effect.map(write(next), () => {
            if (after !== undefined) after(result)
            return result
          })
        })
      )

    const store: Transcripts = {
      historyLimit,
      load: (session, before) =>
        locked(session, before === undefined ? read(session) : Effect.andThen(Effect.sync(before), read(session))),
      accept: (session, texts, after) =>
        update(session, (state) => {
          const at = Date.now()
          const activeAt = (lastStamp = Math.max(at, lastStamp + 1))
          const added = texts.map((text, i): PendingMessage => ({ seq: state.nextSeq + i, text, at }))
          const next = {
            ...state,
            pending: [...state.pending, ...added],
            nextSeq: state.nextSeq + texts.length,
            activeAt
          }
          return [next, added] as const
        }, after),
      drop: (session, seqs) =>
        update(session, (state) => {
          const gone = new Set(seqs)
          return [{ ...state, pending: state.pending.filter((m) => !gone.has(m.seq)) }, undefined] as const
        }),
      record: (session, turn) =>
        update(session, (state) => {
          const answered = new Set(turn.answered)
          const record: TurnRecord = {
            n: state.nextTurn,
            kind: turn.kind,
            user: turn.user,
            reply: turn.reply,
            to: turn.to,
            ...(turn.job === undefined ? {} : { job: turn.job }),
            at: Date.now()
          }
          const turns = [...state.turns, record]
          const next: SessionState = {
            session,
            turns: historyLimit === 0 ? [] : turns.slice(Math.max(0, turns.length - historyLimit)),
            pending: state.pending.filter((m) => !answered.has(m.seq)),
            nextSeq: state.nextSeq,
            nextTurn: state.nextTurn + 1,
            unsent: record,
            ...(state.activeAt === undefined ? {} : { activeAt: state.activeAt })
          }
          return [next, record] as const
        }),
      markSent: (session, n) =>
        update(session, (state) => {
          if (state.unsent?.n !== n) return [state, undefined] as const
          const { unsent: _, ...rest } = state
          return [rest, undefined] as const
        }),
      sessions: Effect.gen(function*() {
        const names = yield* io(dir, "read", () => fs.readdir(dir))
        const out: Array<string> = []
        for (const name of names) {
          if (!name.endsWith(".json")) continue
          const file = path.join(dir, name)
          const content = yield* io(file, "read", () => fs.readFile(file, "utf8"))
          const session = sessionIdOf(content)
          if (session !== undefined) out.push(session)
          else yield* Effect.logWarning(`switchyard: ignoring unreadable transcript ${file}`)
        }
        return out
      }),
      pendingCounts: () => counts
    }
    return store
  })

const sessionIdOf = (content: string): string | undefined => {
  try {
    const value = JSON.parse(content) as { session?: unknown }
    return typeof value.session === "string" ? value.session : undefined
  } catch {
    return undefined
  }
}

const parse = (session: string, file: string, content: string): Effect.Effect<SessionState, TranscriptError> =>
  Effect.suspend(() => {
    let value: Partial<SessionState> & { version?: unknown }
    try {
      value = JSON.parse(content) as typeof value
    } catch (cause) {
      return Effect.fail(
        new TranscriptError({ reason: "corrupt", message: `${file} is not JSON: ${text(cause)}`, path: file })
      )
    }
    if (
      typeof value !== "object" || value === null || value.session !== session || !Array.isArray(value.turns) ||
      !Array.isArray(value.pending) || typeof value.nextSeq !== "number" || typeof value.nextTurn !== "number"
    ) {
      return Effect.fail(
        new TranscriptError({
          reason: "corrupt",
          message: `${file} is not a transcript of session \`${session}\``,
          path: file
        })
      )
    }
    const state: SessionState = {
      session,
      turns: value.turns,
      pending: value.pending,
      nextSeq: value.nextSeq,
      nextTurn: value.nextTurn,
      ...(value.unsent === undefined ? {} : { unsent: value.unsent }),
      ...(typeof value.activeAt === "number" ? { activeAt: value.activeAt } : {})
    }
    return Effect.succeed(state)
  })

const io = <A>(
  file: string,
  what: "read" | "write" | "create",
  f: () => Promise<A>
): Effect.Effect<A, TranscriptError> =>
  Effect.tryPromise({
    try: f,
    catch: (cause) =>
      new TranscriptError({ reason: "io", message: `cannot ${what} ${file}: ${why(file, what, cause)}`, path: file })
  })

/**
 * The reason of a failed call; when a write finds the transcripts' folder gone (the state folder deleted
 * under a running agent, a tmp cleaner), says so: the system's ENOENT names only the temp file.
 */
const why = (file: string, what: "read" | "write" | "create", cause: unknown): string => {
  if (what !== "read" && (cause as NodeJS.ErrnoException | undefined)?.code === "ENOENT") {
    const dir = path.dirname(file)
    if (!fsSync.existsSync(dir)) {
      return `the folder ${dir} is gone (deleted while the agent ran?): nothing can be kept until the agent ` +
        "is restarted, which makes it again"
    }
  }
  return text(cause)
}

/** Removes the temp files a crash (or a full disk, before this version) left in `dir`: only the writer's own `*.tmp` names. */
const sweepTemps = (dir: string): Effect.Effect<void, TranscriptError> =>
  io(dir, "read", async () => {
    for (const name of await fs.readdir(dir)) {
      if (/\.json\.\d+\.\d+\.tmp$/.test(name)) await fs.rm(path.join(dir, name), { force: true })
    }
  })

const text = (cause: unknown): string => cause instanceof Error ? cause.message : String(cause)
