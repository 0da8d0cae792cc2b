/**
 * The answers of volatile runs (protocol.ts `RunNow`), kept in their inbox rows (`<prefix>_inbox.answer`,
 * migration 0007). A volatile run has nothing of effect/cluster's saved, so its inbox rows are its record:
 * unanswered rows are what the shard's owner runs again (Replay.ts), and an answered run sent again is
 * answered from what was written, not run twice. The agent's turn writes its answer in its fenced commit
 * (one statement with the outbox, the transcript and the turn record); a run that fails (canceled, stale,
 * timeout, a handler's failure) is marked here before its failure is sent.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit } from "effect"
import type { SqlError } from "effect/sql/SqlError"

/**
 * A run's answer as stored: `{"ok": <value>}` or `{"err": <wire failure>}` (protocol.ts). `undefined` for
 * an exit that is not an answer (a defect or an interrupt: the transport's, not the run's).
 */
export const encode = (exit: Exit.Exit<unknown, unknown>): string | undefined => {
  if (Exit.isSuccess(exit)) return JSON.stringify({ ok: exit.value ?? null })
  const failure = exit.cause.reasons.find((r) => r._tag === "Fail")
  return failure !== undefined && failure._tag === "Fail" ? JSON.stringify({ err: failure.error }) : undefined
}

/** The exit of a stored answer. */
export const decode = (text: string): Exit.Exit<unknown, unknown> => {
  const a = JSON.parse(text) as { readonly ok?: unknown; readonly err?: unknown }
  return "err" in a ? Exit.fail(a.err) : Exit.succeed(a.ok)
}

/**
 * What a handler fails with when its run was answered before (its turn's start read the stored answer):
 * the runner sends that answer instead of the handler's outcome.
 */
export interface AlreadyAnswered {
  readonly _tag: "AlreadyAnswered"
  readonly answer: string
}

/** The stored answer a handler's failure carries, if it is {@link AlreadyAnswered}. */
export const alreadyAnswered = (exit: Exit.Exit<unknown, unknown>): Exit.Exit<unknown, unknown> | undefined => {
  if (Exit.isSuccess(exit)) return undefined
  const failure = exit.cause.reasons.find((r) => r._tag === "Fail")
  const e = failure !== undefined && failure._tag === "Fail" ? failure.error as Partial<AlreadyAnswered> : undefined
  return e?._tag === "AlreadyAnswered" && typeof e.answer === "string" ? decode(e.answer) : undefined
}

/** An unanswered volatile run, from its inbox rows (the first row's values). */
export interface UnansweredRun {
  readonly runId: string
  readonly session: string
  readonly text: string
  readonly receivedAt: number
  readonly generation: number
  readonly shard: string
}

/** The answers of one cluster's inbox. */
export interface Answers {
  /**
   * Stores `exit` as the answer of `runId`'s inbox rows (nothing when it has none, or one already), only
   * while `fence`'s shard is at its epoch (Fencing.ts); false when that epoch is gone (another runner took
   * the shard: it answers the run, not this one).
   */
  readonly mark: (
    runId: string,
    exit: Exit.Exit<unknown, unknown>,
    fence: { readonly shard: string; readonly epoch: number } | undefined
  ) => Effect.Effect<boolean, SqlError>
  /** The stored answer of `runId`, if it has one. */
  readonly of: (runId: string) => Effect.Effect<Exit.Exit<unknown, unknown> | undefined, SqlError>
  /** The unanswered runs of `shards` whose first message is older than `before` (epoch ms), oldest first. */
  readonly unanswered: (
    shards: ReadonlyArray<string>,
    before: number
  ) => Effect.Effect<ReadonlyArray<UnansweredRun>, SqlError>
}

export const make = (prefix = "switchyard"): Effect.Effect<Answers, never, PgClient.PgClient> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const table = `${prefix}_inbox`
    return {
      mark: (runId, exit, fence) => {
        const answer = encode(exit)
        if (answer === undefined) return Effect.succeed(true)
        return Effect.map(
          sql.unsafe<{ readonly ok: number }>(
            `WITH locked AS MATERIALIZED (
               SELECT 1 AS g FROM ${prefix}_shard_epochs WHERE shard = $3::text AND epoch = $4::bigint FOR SHARE),
             gate AS MATERIALIZED (SELECT 1 AS g WHERE $3::text IS NULL UNION ALL SELECT g FROM locked),
             marked AS (UPDATE ${table} SET answer = $2 WHERE run_id = $1 AND answer IS NULL AND EXISTS (SELECT 1 FROM gate))
             SELECT count(*)::float8 AS ok FROM gate`,
            [runId, answer, fence?.shard ?? null, fence?.epoch ?? null]
          ),
          (rows) => Number(rows[0]?.ok ?? 0) > 0
        )
      },
      of: (runId) =>
        Effect.map(
          sql.unsafe<{ readonly answer: string }>(
            `SELECT answer FROM ${table} WHERE run_id = $1 AND answer IS NOT NULL LIMIT 1`,
            [runId]
          ),
          (rows) => rows.length === 0 ? undefined : decode(rows[0].answer)
        ),
      unanswered: (shards, before) =>
        shards.length === 0 ? Effect.succeed([]) : Effect.map(
          sql.unsafe<
            {
              readonly run_id: string
              readonly session: string
              readonly text: string
              readonly received_at: number
              readonly generation: number | null
              readonly shard: string
            }
          >(
            `SELECT * FROM (
               SELECT DISTINCT ON (run_id) run_id, session, text, received_at::float8 AS received_at,
                 generation::float8 AS generation, shard, id
               FROM ${table} WHERE answer IS NULL AND shard = ANY($1::text[]) AND received_at < $2
               ORDER BY run_id, id) r
             ORDER BY id LIMIT 1000`,
            [shards, before]
          ),
          (rows) =>
            rows.map((r) => ({
              runId: r.run_id,
              session: r.session,
              text: r.text,
              receivedAt: Number(r.received_at),
              generation: Number(r.generation ?? 0),
              shard: r.shard
            }))
        )
    }
  })

/** Answers sent lately by this runner, by run id: a run sent again after it ended is answered at once. */
export interface Recent {
  readonly get: (runId: string) => Exit.Exit<unknown, unknown> | undefined
  readonly set: (runId: string, exit: Exit.Exit<unknown, unknown>) => void
}

/** At most `max` answers, the oldest forgotten first. */
export const recent = (max = 10_000): Recent => {
  const map = new Map<string, Exit.Exit<unknown, unknown>>()
  return {
    get: (runId) => map.get(runId),
    set: (runId, exit) => {
      map.delete(runId)
      map.set(runId, exit)
      if (map.size > max) map.delete(map.keys().next().value!)
    }
  }
}
