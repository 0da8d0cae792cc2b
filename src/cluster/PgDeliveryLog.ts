/**
 * A `DeliveryLog` on Postgres: an outbox table shared by every runner of a cluster.
 *
 * Every mutating call is one statement (or one transaction) that has committed before it returns, so
 * it is as durable as Postgres' commit. Appends to one recipient are serialised by a transaction-scoped
 * advisory lock, so `seq` order per recipient is commit order. Many processes may deliver from one
 * table: `claim` hands out only the head of each recipient's pending entries, under a lease, with
 * `FOR UPDATE SKIP LOCKED`, so two live processes never hold the same entry.
 */
import { Clock, Effect, Option } from "effect"
import type { Scope } from "effect"
import { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"
import { DeliveryLogError } from "../delivery/errors.js"
import type { DeliveryEntry, DeliveryLog, OutboundMessage } from "../delivery/types.js"
import { createOutbox, withSchemaLock } from "./Migrations.js"
import { ackAndClaimSql, checkMessage, COLUMNS, TABLE_NAME, toEntry } from "./pgOutbox.js"
import type { Row } from "./pgOutbox.js"

/** Options of {@link make}. */
export interface PgDeliveryLogOptions {
  /** Table name; letters, digits and `_` only. Default `switchyard_outbox`. */
  readonly table?: string
  /** Largest message (JSON bytes) accepted; default 1 MiB, as the file log. */
  readonly maxRecordBytes?: number
  /** How long an acked entry's idempotency key still dedupes; default 24 h, as the file log. */
  readonly dedupeWindowMs?: number
}

/** A Postgres `DeliveryLog`, plus the claims that let many processes deliver from it. */
export interface PgDeliveryLog extends DeliveryLog {
  /** The table it uses. */
  readonly table: string
  /**
   * Claims up to `limit` due pending entries for `owner` for `leaseMs`: at most one per recipient (the
   * oldest pending one of that recipient), none held by a live lease of another owner. An entry leaves
   * the lease when it is acked, attempted, dead-lettered, released, or when the lease runs out.
   */
  readonly claim: (options: {
    readonly owner: string
    readonly limit: number
    readonly leaseMs: number
  }) => Effect.Effect<ReadonlyArray<DeliveryEntry>, DeliveryLogError>
  /**
   * Appends `message` in ONE statement with other writes, all only when `guard` returns a row.
   *
   * `guard` is a `SELECT` (it may lock rows: `FOR SHARE`); `also` are data-modifying statements
   * (`INSERT ... SELECT ... FROM locked`: `locked` has one row when the guard passed, after the
   * append's advisory locks are taken). Parameters `$1`..`$9` are the append's; `params` are `$10` on.
   * Returns the entry, or `undefined` when the guard returned no row (then nothing was written).
   * One statement means one snapshot, taken before the locks: two appends of one idempotency key
   * racing through this path may both insert. The cluster calls it for a run's reply, which only the
   * shard's owner writes (the guard is its fencing check).
   */
  readonly appendGuarded: (message: OutboundMessage, options: {
    readonly guard: string
    readonly also?: ReadonlyArray<string>
    readonly params?: ReadonlyArray<unknown>
    /** The new entry's id (a caller that must name it before the statement runs); default a random UUID. */
    readonly id?: string
  }) => Effect.Effect<DeliveryEntry | undefined, DeliveryLogError>
  /**
   * {@link appendGuarded} in two steps: checks `message` now (failing as an append does) and returns the
   * statement to run later, with `more` writes (`also` CTEs after the others, their `params` after
   * `options.params`): the cluster runs it with a run's reply (Storage.ts).
   */
  readonly prepareGuarded: (message: OutboundMessage, options: {
    readonly guard: string
    readonly also?: ReadonlyArray<string>
    readonly params?: ReadonlyArray<unknown>
    readonly id?: string
  }) => Effect.Effect<
    (more?: {
      readonly also: ReadonlyArray<string>
      readonly params: ReadonlyArray<unknown>
    }) => Effect.Effect<DeliveryEntry | undefined, DeliveryLogError>,
    DeliveryLogError
  >
  /**
   * Acks `acks` (delivered entries; a dead one is left dead) and claims as {@link claim} does, in one
   * statement: the head of a recipient acked here makes its next entry claimable in the same statement.
   */
  readonly ackAndClaim: (options: {
    readonly acks: ReadonlyArray<string>
    readonly owner: string
    readonly limit: number
    readonly leaseMs: number
  }) => Effect.Effect<ReadonlyArray<DeliveryEntry>, DeliveryLogError>
  /** Gives a claimed entry back without counting an attempt (the owner shuts down). */
  readonly release: (id: string, owner: string) => Effect.Effect<void, DeliveryLogError>
  /** Ids of entries whose lease `owner` holds now. */
  readonly leased: (owner: string) => Effect.Effect<ReadonlyArray<string>, DeliveryLogError>
}

const invalid = (reason: "invalid", message: string) => new DeliveryLogError({ reason, message })

/**
 * Creates the outbox table and its indexes when missing, under the cluster's schema lock (safe from many
 * processes at once). A runner's outbox is part of `Migrations.migrate`; this is for a table of its own.
 */
export const migrate = (table: string): Effect.Effect<void, SqlError, SqlClient.SqlClient> =>
  withSchemaLock(createOutbox(table))

/**
 * Opens the Postgres delivery log on the `SqlClient` in context (creating its table when missing).
 * After the Scope closes every call fails with `reason: "closed"`.
 */
export const make = (
  options: PgDeliveryLogOptions = {}
): Effect.Effect<PgDeliveryLog, DeliveryLogError, SqlClient.SqlClient | Scope.Scope> =>
  Effect.gen(function*() {
    const table = options.table ?? "switchyard_outbox"
    if (!TABLE_NAME.test(table)) {
      return yield* invalid(
        "invalid",
        `Expected \`table\` to be letters, digits and \`_\` (at most 51), got \`${table}\``
      )
    }
    const maxRecordBytes = options.maxRecordBytes ?? 1024 * 1024
    const dedupeWindowMs = options.dedupeWindowMs ?? 24 * 60 * 60 * 1000
    const sql = yield* SqlClient.SqlClient
    let closed = false
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
      })
    )

    const io = (what: string) => (e: SqlError) =>
      new DeliveryLogError({
        reason: "io",
        message: `Postgres ${what} failed: ${e.message}${e.cause instanceof Error ? `: ${e.cause.message}` : ""}`
      })
    const guard = <A, E, R>(
      what: string,
      self: Effect.Effect<A, E, R>
    ): Effect.Effect<A, Exclude<E, SqlError> | DeliveryLogError, R> =>
      Effect.suspend(() =>
        closed
          ? Effect.fail(new DeliveryLogError({ reason: "closed", message: "The delivery log is closed" }))
          : Effect.mapError(self, (e) =>
            (e as { _tag?: string })._tag === "SqlError" ? io(what)(e as SqlError) : (e as Exclude<E, SqlError>))
      )
    const unknownId = (id: string) =>
      new DeliveryLogError({ reason: "unknown-id", message: `No pending or dead entry \`${id}\` in ${table}` })

    yield* Effect.mapError(migrate(table), io("creating the outbox table"))

    const cols = COLUMNS

    /** Checks `message` and computes what both appends write. */
    const prepare = (message: OutboundMessage, id: string = crypto.randomUUID()) =>
      Effect.flatMap(checkMessage(message, maxRecordBytes), (body) =>
        Effect.map(Clock.currentTimeMillis, (now) => {
          const key = message.idempotencyKey ?? null
          return {
            params: [id, message.channel, message.to, body, key, now, now - dedupeWindowMs] as Array<unknown>,
            recipientLock: `${table}\u001f${message.channel}\u001f${message.to}`,
            keyLock: key === null ? null : `${table}\u001e${key}`
          }
        }))

    // The entry the key ($5) still dedupes to (an acked one within the window comes back as it was when
    // acked), or else the new entry.
    const existingSql = (from: string) =>
      `SELECT ${cols} FROM ${table}${from} WHERE $5::text IS NOT NULL AND idempotency_key = $5
         AND (status <> 'acked' OR acked_at > $7) ORDER BY seq DESC LIMIT 1`
    const insertSql = (from: string) =>
      `INSERT INTO ${table} (id, channel, recipient, body, idempotency_key, enqueued_at, status)
       SELECT $1, $2, $3, $4, $5, $6, 'pending'${from} WHERE NOT EXISTS (SELECT 1 FROM existing)
       RETURNING ${cols}`

    const append = (message: OutboundMessage): Effect.Effect<DeliveryEntry, DeliveryLogError> =>
      Effect.gen(function*() {
        const p = yield* prepare(message)
        return yield* guard(
          "append",
          sql.withTransaction(Effect.gen(function*() {
            // Serialise appends per recipient (seq order = commit order) and per idempotency key.
            if (p.keyLock === null) {
              yield* sql.unsafe(`SELECT pg_advisory_xact_lock(hashtext($1))::text AS l`, [p.recipientLock])
            } else {
              yield* sql.unsafe(
                `SELECT pg_advisory_xact_lock(hashtext($1))::text AS l, pg_advisory_xact_lock(hashtext($2))::text AS k`,
                [p.recipientLock, p.keyLock]
              )
            }
            const rows = yield* sql.unsafe<Row>(
              `WITH existing AS (${existingSql("")}), inserted AS (${insertSql("")})
             SELECT * FROM existing UNION ALL SELECT * FROM inserted`,
              p.params
            )
            return toEntry(rows[0])
          }))
        )
      })

    const prepareGuarded: PgDeliveryLog["prepareGuarded"] = (message, options) =>
      Effect.map(prepare(message, options.id), (p) => (more) => {
        const also = [...(options.also ?? []), ...(more?.also ?? [])]
        return Effect.map(
          guard(
            "append",
            sql.unsafe<Row>(
              `WITH gate AS MATERIALIZED (${options.guard}),
             locked AS MATERIALIZED (
               SELECT pg_advisory_xact_lock(hashtext($8))::text AS r,
                 CASE WHEN $9::text IS NULL THEN '' ELSE pg_advisory_xact_lock(hashtext($9))::text END AS k
               FROM (SELECT 1 FROM gate LIMIT 1) g
             ),
             existing AS MATERIALIZED (${existingSql(", locked")}),
             inserted AS (${insertSql(" FROM locked")})
             ${
                also.map((a, i) => `, also${i} AS (${a})`).join("\n")
              }
             SELECT * FROM existing UNION ALL SELECT * FROM inserted`,
              [...p.params, p.recipientLock, p.keyLock, ...(options.params ?? []), ...(more?.params ?? [])]
            )
          ),
          (rows) => rows.length === 0 ? undefined : toEntry(rows[0])
        )
      })

    const appendGuarded: PgDeliveryLog["appendGuarded"] = (message, options) =>
      Effect.flatMap(prepareGuarded(message, options), (run) => run())

    const updateLive = (
      what: string,
      id: string,
      statement: Effect.Effect<ReadonlyArray<Row>, SqlError>
    ): Effect.Effect<DeliveryEntry, DeliveryLogError> =>
      guard(
        what,
        Effect.flatMap(
          statement,
          (rows) => rows.length === 0 ? Effect.fail(unknownId(id)) : Effect.succeed(toEntry(rows[0]))
        )
      )

    /** Why a call that needs a pending entry changed no row: the entry is dead (`not-pending`), or gone (`unknown-id`). */
    const notPendingOrUnknown = (id: string, what: string): Effect.Effect<DeliveryLogError, SqlError> =>
      Effect.map(
        sql.unsafe<{ readonly status: string }>(`SELECT status FROM ${table} WHERE id = $1 AND status = 'dead'`, [id]),
        (dead) =>
          dead.length > 0
            ? new DeliveryLogError({
              reason: "not-pending",
              message: `Expected a pending entry to ${what}, got dead entry \`${id}\` in ${table}`
            })
            : unknownId(id)
      )

    const ackAndClaim: PgDeliveryLog["ackAndClaim"] = ({ acks, leaseMs, limit, owner }) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        guard(
          acks.length === 0 ? "claim" : "ack and claim",
          Effect.map(
            sql.unsafe<Row>(
              ackAndClaimSql(table),
              [owner, now, Math.max(0, limit), now + leaseMs, acks]
            ),
            (rows) => rows.map(toEntry).sort((a, b) => a.seq - b.seq)
          )
        ))

    const log: PgDeliveryLog = {
      table,
      append,
      appendGuarded,
      prepareGuarded,
      attempt: (id, failure) =>
        guard(
          "attempt",
          Effect.gen(function*() {
            const rows = yield* sql.unsafe<Row>(
              `UPDATE ${table} SET attempts = attempts + 1, last_error = $2, attempt_started = false,
               next_attempt_at = CASE WHEN $4 THEN NULL ELSE $3 END,
               status = CASE WHEN $4 THEN 'dead' ELSE status END,
               lease_owner = NULL, lease_until = NULL
               WHERE id = $1 AND status = 'pending' RETURNING ${cols}`,
              [id, failure.error, Math.round(failure.nextAttemptAt), failure.dead === true]
            )
            if (rows.length > 0) return toEntry(rows[0])
            return yield* Effect.fail(yield* notPendingOrUnknown(id, "record an attempt of"))
          })
        ),
      ack: (id) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          guard(
            "ack",
            Effect.gen(function*() {
              const rows = yield* sql.unsafe<{ readonly status: string }>(
                `UPDATE ${table} SET status = 'acked', acked_at = COALESCE(acked_at, $2), lease_owner = NULL, lease_until = NULL
               WHERE id = $1 AND status <> 'dead' RETURNING status`,
                [id, now]
              )
              if (rows.length === 0) {
                const dead = yield* sql.unsafe<{ readonly id: string }>(
                  `SELECT id FROM ${table} WHERE id = $1 AND status = 'dead'`,
                  [id]
                )
                if (dead.length > 0) {
                  return yield* Effect.fail(
                    new DeliveryLogError({
                      reason: "not-pending",
                      message: `Expected a pending entry to ack, got dead entry \`${id}\` in ${table}`
                    })
                  )
                }
                return yield* Effect.fail(unknownId(id))
              }
            })
          )),
      deadLetter: (id, reason) =>
        Effect.asVoid(updateLive(
          "deadLetter",
          id,
          sql.unsafe<Row>(
            `UPDATE ${table} SET status = 'dead', last_error = $2, lease_owner = NULL, lease_until = NULL
             WHERE id = $1 AND status <> 'acked' RETURNING ${cols}`,
            [id, reason]
          )
        )),
      requeue: (id) =>
        Effect.asVoid(updateLive(
          "requeue",
          id,
          sql.unsafe<Row>(
            `UPDATE ${table} SET status = 'pending', attempts = 0, next_attempt_at = NULL, attempt_started = false, lease_owner = NULL, lease_until = NULL
             WHERE id = $1 AND status <> 'acked' RETURNING ${cols}`,
            [id]
          )
        )),
      // One committed statement: concurrent marks share Postgres' WAL flushes (its own group commit).
      markStarted: (id) =>
        guard(
          "markStarted",
          Effect.gen(function*() {
            const rows = yield* sql.unsafe<{ readonly status: string }>(
              `UPDATE ${table} SET attempt_started = true WHERE id = $1 AND status = 'pending' RETURNING status`,
              [id]
            )
            if (rows.length > 0) return
            return yield* Effect.fail(yield* notPendingOrUnknown(id, "start an attempt of"))
          })
        ),
      get: (id) =>
        sql.unsafe<Row>(`SELECT ${cols} FROM ${table} WHERE id = $1 AND status <> 'acked'`, [id]).pipe(
          Effect.map((rows) => rows.length === 0 ? Option.none() : Option.some(toEntry(rows[0]))),
          Effect.orDie
        ),
      pending: sql.unsafe<Row>(`SELECT ${cols} FROM ${table} WHERE status = 'pending' ORDER BY seq`).pipe(
        Effect.map((rows) => rows.map(toEntry)),
        Effect.orDie
      ),
      dead: sql.unsafe<Row>(`SELECT ${cols} FROM ${table} WHERE status = 'dead' ORDER BY seq`).pipe(
        Effect.map((rows) => rows.map(toEntry)),
        Effect.orDie
      ),
      stats: sql.unsafe<{ readonly pending: number; readonly dead: number; readonly bytes: number }>(
        `SELECT count(*) FILTER (WHERE status = 'pending')::float8 AS pending,
                count(*) FILTER (WHERE status = 'dead')::float8 AS dead,
                pg_total_relation_size($1::regclass)::float8 AS bytes
         FROM ${table}`,
        [table]
      ).pipe(
        Effect.map((rows) => ({
          pending: Number(rows[0].pending),
          dead: Number(rows[0].dead),
          segments: 1,
          bytes: Number(rows[0].bytes)
        })),
        Effect.orDie
      ),
      // Postgres heals on its own side (the pool reconnects); a failed call fails with its own error.
      health: Effect.succeed({ status: "ok" } as const),
      // Every call has committed before it returned: nothing is buffered.
      flush: guard("flush", Effect.void),
      compact: Effect.flatMap(Clock.currentTimeMillis, (now) =>
        guard(
          "compact",
          Effect.asVoid(
            sql.unsafe(`DELETE FROM ${table} WHERE status = 'acked' AND acked_at <= $1`, [now - dedupeWindowMs])
          )
        )),
      claim: ({ owner, limit, leaseMs }) => ackAndClaim({ acks: [], owner, limit, leaseMs }),
      ackAndClaim: (options) => ackAndClaim(options),
      release: (id, owner) =>
        guard(
          "release",
          Effect.asVoid(sql.unsafe(
            `UPDATE ${table} SET lease_owner = NULL, lease_until = NULL WHERE id = $1 AND lease_owner = $2`,
            [id, owner]
          ))
        ),
      leased: (owner) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) =>
          guard(
            "leased",
            Effect.map(
              sql.unsafe<{ readonly id: string }>(
                `SELECT id FROM ${table} WHERE lease_owner = $1 AND lease_until >= $2 AND status = 'pending'`,
                [owner, now]
              ),
              (rows) => rows.map((r) => r.id)
            )
          ))
    }
    return log
  })
