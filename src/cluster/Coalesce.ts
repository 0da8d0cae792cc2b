/**
 * Coalescing across processes. A key's runs reach its runner one at a time, so "join the run of this
 * key that waits" must be decided where the waiting run is: in Postgres. Each (lane, key) has a slot
 * row `(slot, started)`. A coalescing dispatch locks the row (`<prefix>_coalesce_slot`, one statement):
 * if the slot's run has not started it joins it (same run id, so the cluster dedupes the message),
 * else it takes the next slot; with an inbox message, the message is recorded for that run under the
 * same lock. Every dispatch then sends the run (the first save wins, the others are duplicates of it),
 * so a joined run is durable even when the dispatch that opened its slot died before sending.
 *
 * The runner marks the slot started, waiting for that lock, before the run reads its inbox rows
 * (`<prefix>_turn_start` does both, see ClusterAgent.ts; otherwise `markStarted`). So a coalescing
 * dispatch never joins a run that has started, every message recorded for a run is seen by its turn,
 * and a trigger that arrives while a run runs is never lost: it owes exactly one follow-up run.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect } from "effect"
import type { SqlError } from "effect/sql/SqlError"

/** A message to record in the inbox for the run a coalescing dispatch joins or opens (Inbox.ts). */
export interface InboxMessage {
  readonly session: string
  /** The client's message id: a message id recorded before joins the run it was recorded for. */
  readonly messageId?: string
  readonly text: string
  /**
   * The key entity's shard (`group:id`) and the lane's generation, recorded with the row when the run is
   * sent as a volatile request: the row is then the run's durability (Replay.ts).
   */
  readonly shard?: string
  readonly generation?: number
  /**
   * With `shard`: the transcript rows the key's turn reads (its history). When the session is idle (no
   * unanswered inbox row), the slot statement opens its run already started and returns those rows, so
   * the turn needs no statement of its own before the model (SlotStartSql.ts, {@link Slot.started}).
   */
  readonly history?: number
}

/** One transcript row, as a turn's history reads it. */
export interface HistoryRow {
  readonly role: "user" | "assistant"
  readonly content: string
}

/**
 * What a run that its slot statement started carries to its turn: its messages (the one recorded: nothing
 * joins a started run) and the session's history then (`rows` asked for, at most that many given).
 */
export interface Prefetched {
  readonly texts: ReadonlyArray<string>
  readonly history: ReadonlyArray<HistoryRow>
  readonly rows: number
}

/**
 * {@link Prefetched} as a run carries it between runners: the history is the slot statement's JSON text
 * (`[[role, content], ...]`, oldest first), passed through as it came and parsed once, by the runner that
 * runs the turn ({@link parseStarted}), instead of parsed where the message arrived, encoded again for the
 * hop and decoded row by row by its Schema on the other side.
 */
export interface StartedRaw {
  readonly texts: ReadonlyArray<string>
  readonly history: string
  readonly rows: number
}

/**
 * The turn's {@link Prefetched} of a {@link StartedRaw}, or `undefined` when its history is not the slot
 * statement's shape (the turn then reads what is stored, as a run not started by its slot does).
 */
export const parseStarted = (raw: StartedRaw): Prefetched | undefined => {
  let rows: unknown
  try {
    rows = JSON.parse(raw.history)
  } catch {
    return undefined
  }
  if (!Array.isArray(rows)) return undefined
  const history = new Array<HistoryRow>(rows.length)
  for (let i = 0; i < rows.length; i++) {
    const row: unknown = rows[i]
    if (!Array.isArray(row)) return undefined
    const [role, content] = row as [unknown, unknown]
    if ((role !== "user" && role !== "assistant") || typeof content !== "string") return undefined
    history[i] = { role, content }
  }
  return { texts: raw.texts, history, rows: raw.rows }
}

/** The run a coalescing dispatch takes. */
export interface Slot {
  readonly runId: string
  /** The key's slot (absent when a re-sent inbox message joins the run it was first recorded for). */
  readonly slot: number | undefined
  readonly joined: boolean
  /** Set when the statement opened the slot already started (an idle session; `history` asked for). */
  readonly started?: StartedRaw
}

/** The coalescing slots of one cluster (table `<prefix>_coalesce`). */
export interface Coalesce {
  /**
   * Joins the key's run that waits and has not started, or opens the next slot, in one statement;
   * with `inbox`, records the message for that run under the slot's lock.
   */
  readonly slot: (lane: string, key: string, inbox?: InboxMessage) => Effect.Effect<Slot, SqlError>
  /** The same, then `inside` with the run id, in one transaction that holds the slot's lock. */
  readonly withSlot: <A, E, R>(
    lane: string,
    key: string,
    inside: (slot: Slot) => Effect.Effect<A, E, R>
  ) => Effect.Effect<A, E | SqlError, R>
  /** The runner is about to run `slot` of the key: later coalescing dispatches take the next slot. */
  readonly markStarted: (lane: string, key: string, slot: number) => Effect.Effect<void, SqlError>
}

/** The run id of a slot (the same text `<prefix>_coalesce_slot` builds). */
export const runIdOf = (lane: string, key: string, slot: number): string => `coalesce:${lane}:${key}:${slot}`

/** The slots of `prefix` (the table and its functions come from `Migrations.migrate`). */
export const make = (prefix = "switchyard"): Effect.Effect<Coalesce, never, PgClient.PgClient> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const table = `${prefix}_coalesce`
    const take = (lane: string, key: string, inbox: InboxMessage | undefined) => {
      const start = inbox?.shard !== undefined && inbox.history !== undefined
      const text = start
        ? `SELECT out_slot::float8 AS slot, out_joined AS joined, out_run_id AS run_id, out_history AS history
           FROM ${prefix}_coalesce_slot_start($1, $2, $3, $4, $5, $6, $7::text, $8::bigint, $9::integer)`
        : inbox?.shard === undefined
        ? `SELECT out_slot::float8 AS slot, out_joined AS joined, out_run_id AS run_id
           FROM ${prefix}_coalesce_slot($1, $2, $3, $4, $5, $6)`
        : `SELECT out_slot::float8 AS slot, out_joined AS joined, out_run_id AS run_id
           FROM ${prefix}_coalesce_slot($1, $2, $3, $4, $5, $6, $7::text, $8::bigint)`
      return Effect.map(
        sql.unsafe<
          {
            readonly slot: number | null
            readonly joined: boolean
            readonly run_id: string
            readonly history?: string | null
          }
        >(
          text,
          [
            lane,
            key,
            inbox?.session ?? null,
            inbox?.messageId ?? null,
            inbox?.text ?? null,
            Date.now(),
            ...(inbox?.shard === undefined ? [] : [inbox.shard, inbox.generation ?? 0]),
            ...(start ? [inbox.history] : [])
          ]
        ),
        (rows): Slot => {
          const row = rows[0]
          const history = row.history ?? undefined
          return {
            runId: row.run_id,
            slot: row.slot === null ? undefined : Number(row.slot),
            joined: row.joined,
            ...(history === undefined || inbox === undefined || !start ? {} : {
              started: { texts: [inbox.text], history, rows: inbox.history! }
            })
          }
        }
      )
    }
    return {
      slot: take,
      withSlot: (lane, key, inside) => sql.withTransaction(Effect.flatMap(take(lane, key, undefined), inside)),
      markStarted: (lane, key, slot) =>
        Effect.asVoid(sql.unsafe(
          `UPDATE ${table} SET started = true WHERE lane = $1 AND key = $2 AND slot = $3`,
          [lane, key, slot]
        ))
    }
  })
