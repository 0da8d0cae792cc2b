/**
 * Chats upgraded to supergroups: the old chat id and the new one, kept in
 * `<state-dir>/telegram/migrated.json` (stateFile.ts: JSON, 0600 in a 0700 folder, replaced
 * atomically) so that after a restart a reply to the old id goes straight to the new one instead of
 * being refused once more. A file that cannot be read or does not hold such a map is reported in
 * one line, set aside as `migrated.json.corrupt`, and the bot goes on without it: each migration it
 * held is learned again from Telegram's next 400 `migrate_to_chat_id`. A failed write is reported
 * too; the migration then holds for this run only.
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import { readState, writeState } from "./stateFile.js"

/** The chats the bot knows were upgraded, and how it learns a new one. */
export interface Migrations {
  /** The chat `chat` became, if Telegram said so (in this run or an earlier one). */
  readonly get: (chat: string) => string | undefined
  /** `chat` became `to`: known at once, and written to the file before it returns. */
  readonly add: (chat: string, to: string) => Effect.Effect<void>
}

const CHAT_ID = /^-?\d{1,20}$/

/** Why `value` is not a map of chat ids to chat ids, or undefined when it is one. */
const problemOf = (value: unknown): string | undefined => {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return `expected an object of chat ids, got ${Array.isArray(value) ? "an array" : JSON.stringify(value)}`
  }
  for (const [from, to] of Object.entries(value)) {
    if (!CHAT_ID.test(from) || typeof to !== "string" || !CHAT_ID.test(to)) {
      return `expected chat id -> chat id, got ${JSON.stringify(from)} -> ${JSON.stringify(to)}`
    }
  }
  return undefined
}

/** Sets a bad file aside (so that the next write does not destroy it); says where it went. */
const setAside = (file: string): string => {
  const aside = `${file}.corrupt`
  try {
    fs.renameSync(file, aside)
    return `the file is kept as ${aside}`
  } catch (cause) {
    return `it could not be set aside (${cause instanceof Error ? cause.message : String(cause)})`
  }
}

/**
 * The migrations kept in `file`; `report` gets one line for a file that could not be used (it
 * never fails: the bot runs without what the file held) and one for each failed write.
 */
export const loadMigrations = (file: string, report: (line: string) => void): Effect.Effect<Migrations> =>
  Effect.gen(function*() {
    const loaded = yield* readState<unknown>(file, {}).pipe(
      Effect.map((value) => ({ value, problem: problemOf(value) })),
      Effect.catch((error) => Effect.succeed({ value: {}, problem: error.message }))
    )
    let known = new Map<string, string>()
    if (loaded.problem === undefined) known = new Map(Object.entries(loaded.value as Record<string, string>))
    else {
      report(
        `error: telegram: the chat migrations in ${file} cannot be used (${loaded.problem}); ${
          setAside(file)
        }; the bot goes on without them, and learns each again from Telegram's next refusal`
      )
    }
    return {
      get: (chat) => known.get(chat),
      add: (chat, to) =>
        Effect.suspend(() => {
          known.set(chat, to)
          return writeState(file, Object.fromEntries(known))
        }).pipe(
          Effect.catch((error) =>
            Effect.sync(() =>
              report(`error: telegram: ${error.message}; chat ${chat} -> ${to} holds for this run only`)
            )
          )
        )
    } satisfies Migrations
  })
