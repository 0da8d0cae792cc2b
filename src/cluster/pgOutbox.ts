/** The rows of the Postgres outbox (`PgDeliveryLog`): their columns, their entries, what an append accepts. */
import { Effect } from "effect"
import { DeliveryLogError } from "../delivery/errors.js"
import type { DeliveryEntry, OutboundMessage } from "../delivery/types.js"
import { notJson } from "./json.js"

export interface Row {
  readonly id: string
  readonly seq: number
  readonly channel: string
  readonly recipient: string
  readonly body: string
  readonly idempotency_key: string | null
  readonly enqueued_at: number
  readonly attempts: number
  readonly last_error: string | null
  readonly next_attempt_at: number | null
  readonly status: "pending" | "dead" | "acked"
  readonly attempt_started: boolean
}

export const TABLE_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,50}$/

export const toEntry = (r: Row): DeliveryEntry => {
  const message: OutboundMessage = r.idempotency_key === null
    ? { channel: r.channel, to: r.recipient, body: JSON.parse(r.body) }
    : { channel: r.channel, to: r.recipient, body: JSON.parse(r.body), idempotencyKey: r.idempotency_key }
  return {
    id: r.id,
    seq: Number(r.seq),
    message,
    enqueuedAt: Number(r.enqueued_at),
    attempts: Number(r.attempts),
    ...(r.last_error === null ? {} : { lastError: r.last_error }),
    ...(r.next_attempt_at === null ? {} : { nextAttemptAt: Number(r.next_attempt_at) }),
    status: r.status === "dead" ? "dead" : "pending",
    ...(r.attempt_started ? { maybeSent: true } : {})
  }
}

/** The columns every statement returns, as {@link Row} reads them. */
export const COLUMNS =
  `id, seq::float8 AS seq, channel, recipient, body, idempotency_key, enqueued_at::float8 AS enqueued_at,
       attempts, last_error, next_attempt_at::float8 AS next_attempt_at, status, attempt_started`

const invalid = (reason: "invalid" | "too-large", message: string) => new DeliveryLogError({ reason, message })

/** Checks `message` as an append does; returns its body as JSON text. */
export const checkMessage = (
  message: OutboundMessage,
  maxRecordBytes: number
): Effect.Effect<string, DeliveryLogError> =>
  Effect.suspend(() => {
    if (typeof message.channel !== "string" || message.channel.length === 0) {
      return Effect.fail(
        invalid("invalid", "Expected `channel` to be a non-empty string, got `" + String(message.channel) + "`")
      )
    }
    if (typeof message.to !== "string" || message.to.length === 0) {
      return Effect.fail(invalid("invalid", "Expected `to` to be a non-empty string, got `" + String(message.to) + "`"))
    }
    if (
      message.channel.includes("\u0000") || message.to.includes("\u0000") ||
      message.idempotencyKey?.includes("\u0000")
    ) {
      return Effect.fail(
        invalid(
          "invalid",
          "Expected `channel`, `to` and `idempotencyKey` without NUL characters (Postgres text cannot hold them)"
        )
      )
    }
    const bad = notJson(message.body, "body")
    if (bad !== undefined) return Effect.fail(invalid("invalid", `Expected \`body\` to be a JSON value: ${bad}`))
    const body = JSON.stringify(message.body)
    const bytes = Buffer.byteLength(body) + Buffer.byteLength(message.channel) + Buffer.byteLength(message.to) +
      Buffer.byteLength(message.idempotencyKey ?? "")
    if (bytes > maxRecordBytes) {
      return Effect.fail(
        invalid("too-large", `Expected a message of at most ${maxRecordBytes} bytes (\`maxRecordBytes\`), got ${bytes}`)
      )
    }
    return Effect.succeed(body)
  })

/**
 * Acks the ids of `$5` (pending ones) and leases up to `$3` due heads of recipients to `$1` until `$4`
 * (`$2` is now), in one statement: the entries acked here are no heads any more, so their recipients'
 * next entries are claimable in the same statement.
 *
 * The heads are computed once (an array, `ARRAY(SELECT ...)`: an init plan) and looked up by id. Until
 * session 14 they were a CTE joined to the table; the planner, whose statistics lag a table that fills
 * faster than it is analyzed, estimated one pending row and re-sorted the heads for every pending row
 * (a nested loop: quadratic in the backlog), 3.1 to 3.4 ms for 159 pending entries of 55 recipients against
 * 0.64 to 0.67 now, and 12 to 53 ms per statement on a runner's backlog (bench/README.md, issue 15, session 14).
 */
export const ackAndClaimSql = (table: string): string =>
  `WITH acked AS (
     UPDATE ${table} SET status = 'acked', acked_at = COALESCE(acked_at, $2), lease_owner = NULL, lease_until = NULL
     WHERE id = ANY($5::text[]) AND status = 'pending' RETURNING id
   ), due AS (
     -- conditions on o (the locked row) so they are re-checked against its latest version
     SELECT o.id FROM ${table} o
     WHERE o.id = ANY (ARRAY(
         -- each recipient's head; the entries acked above are no heads any more: their recipients'
         -- next entries are
         SELECT DISTINCT ON (channel, recipient) id
         FROM ${table} WHERE status = 'pending' AND id <> ALL($5::text[])
         ORDER BY channel, recipient, seq))
       AND o.status = 'pending'
       AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= $2)
       AND (o.lease_until IS NULL OR o.lease_until < $2)
     ORDER BY o.seq LIMIT $3
     FOR UPDATE OF o SKIP LOCKED
   )
   UPDATE ${table} SET lease_owner = $1, lease_until = $4
   WHERE id IN (SELECT id FROM due) AND status = 'pending'
   RETURNING ${COLUMNS}`
