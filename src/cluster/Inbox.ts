/**
 * The agent's inbox across processes (`<prefix>_inbox`): the messages of a session, each recorded for
 * the run that answers it. The ingress dispatches every message with `coalesce`, so a message that
 * arrives while the session's turn runs joins the session's next run that waits (or opens it); its row
 * is written inside the coalescing slot's lock, before that run can start. The turn reads the rows of
 * its run id and answers them together, as the single-process agent does; a replay on another runner
 * reads the same rows.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import type { SqlError } from "effect/sql/SqlError"

/** The inbox of one cluster. */
export interface Inbox {
  /** Records `text` (client id `messageId`, if any) of `session` for the run `runId`; false when that message id was recorded before. */
  readonly add: (
    session: string,
    messageId: string | undefined,
    text: string,
    runId: string
  ) => Effect.Effect<boolean, SqlError>
  /** The run a client message id was recorded for, if any (a re-sent message joins it). */
  readonly runOf: (session: string, messageId: string) => Effect.Effect<string | undefined, SqlError>
}

export const make = (prefix = "switchyard"): Effect.Effect<Inbox, never, PgClient.PgClient> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const table = `${prefix}_inbox`
    return {
      add: (session, messageId, text, runId) =>
        Effect.map(
          sql.unsafe(
            `INSERT INTO ${table} (session, message_id, text, run_id, received_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (session, message_id) DO NOTHING RETURNING id`,
            [session, messageId ?? null, text, runId, Date.now()]
          ),
          (rows) => rows.length > 0
        ),
      runOf: (session, messageId) =>
        Effect.map(
          sql.unsafe<{ readonly run_id: string }>(
            `SELECT run_id FROM ${table} WHERE session = $1 AND message_id = $2`,
            [session, messageId]
          ),
          (rows) => rows[0]?.run_id
        )
    }
  })
