/**
 * Lane generations shared by every process of a cluster, in Postgres.
 *
 * A lane's generation lives in one row; `bump` increments it and sends a `NOTIFY`. Every member
 * listens (and also polls, in case a notification was missed), applies a newer generation locally
 * (the caller's `apply` makes the local tasks of older generations stale and waits for them), then
 * records in its membership row that it has applied it. `awaitApplied` waits until every live member
 * (one that refreshed its row within `memberTtlMs`) applied a generation.
 */
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Queue, Schedule, Semaphore } from "effect"
import type { Scope } from "effect"
import type { SqlError } from "effect/sql/SqlError"

/** One member's view of the shared generations. */
export interface Generations {
  /** This member's id (its runner name). */
  readonly member: string
  /** The generation last applied here (0 for a lane never restarted). Never waits. */
  readonly current: (lane: string) => number
  /** Increments the lane's generation in Postgres, notifies every member, applies it here; returns it. */
  readonly bump: (lane: string) => Effect.Effect<number, SqlError>
  /** Reads the lane's generation from Postgres and applies it here when newer. */
  readonly refresh: (lane: string) => Effect.Effect<number, SqlError>
  /** Waits until every live member applied `generation` of `lane`, or `timeoutMs` passed; returns whether all did. */
  readonly awaitApplied: (lane: string, generation: number, timeoutMs: number) => Effect.Effect<boolean, SqlError>
  /** Members seen within the TTL, with the generations they applied. */
  readonly members: Effect.Effect<
    ReadonlyArray<{ readonly member: string; readonly seenAgoMs: number; readonly applied: Record<string, number> }>,
    SqlError
  >
}

/** Options of {@link make}. */
export interface GenerationsOptions {
  readonly member: string
  /** Table prefix, default `switchyard`: tables `<prefix>_generations` and `<prefix>_members`. */
  readonly prefix?: string
  /** Called (one lane at a time) when a newer generation arrives; returns once the local stale tasks ended. */
  readonly apply: (lane: string, generation: number) => Effect.Effect<void>
  /** How often a member refreshes its row and re-reads generations; default 1_000. */
  readonly heartbeatMs?: number
  /** A member whose row is older than this is not waited for; default 5_000. */
  readonly memberTtlMs?: number
}

/** Joins the shared generations for the Scope's lifetime (its tables come from `Migrations.migrate`). */
export const make = (
  options: GenerationsOptions
): Effect.Effect<Generations, SqlError, PgClient.PgClient | Scope.Scope> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const prefix = options.prefix ?? "switchyard"
    const gens = `${prefix}_generations`
    const members = `${prefix}_members`
    const channel = `${prefix}_generations`
    const heartbeatMs = options.heartbeatMs ?? 1_000
    const memberTtlMs = options.memberTtlMs ?? 5_000
    const member = options.member

    const local = new Map<string, number>()
    // One apply at a time, so a lane's generations are applied in order.
    const applyLock = yield* Semaphore.make(1)

    const record = (lane: string, generation: number) =>
      sql.unsafe(
        `INSERT INTO ${members} (member, seen_at, applied) VALUES ($1, $2, jsonb_build_object($3::text, $4::bigint))
         ON CONFLICT (member) DO UPDATE SET seen_at = $2,
           applied = ${members}.applied || jsonb_build_object($3::text, GREATEST(COALESCE((${members}.applied->>$3)::bigint, 0), $4::bigint))`,
        [member, Date.now(), lane, generation]
      )

    const applyNewer = (lane: string, generation: number) =>
      applyLock.withPermits(1)(Effect.gen(function*() {
        if ((local.get(lane) ?? 0) >= generation) return
        local.set(lane, generation)
        yield* options.apply(lane, generation)
        yield* record(lane, generation)
      }))

    const readAll = Effect.gen(function*() {
      const rows = yield* sql.unsafe<{ readonly lane: string; readonly generation: number }>(
        `SELECT lane, generation::float8 AS generation FROM ${gens}`
      )
      for (const r of rows) yield* applyNewer(r.lane, Number(r.generation))
    })

    const heartbeat = sql.unsafe(
      `INSERT INTO ${members} (member, seen_at) VALUES ($1, $2) ON CONFLICT (member) DO UPDATE SET seen_at = $2`,
      [member, Date.now()]
    )

    yield* heartbeat
    yield* readAll
    // The membership heartbeat and the read of every lane's generation: one statement.
    yield* Effect.suspend(() =>
      sql.unsafe<{ readonly lane: string; readonly generation: number }>(
        `WITH seen AS (UPDATE ${members} SET seen_at = $2 WHERE member = $1)
         SELECT lane, generation::float8 AS generation FROM ${gens}`,
        [member, Date.now()]
      )
    ).pipe(
      Effect.flatMap((rows) =>
        Effect.forEach(rows, (r) => applyNewer(r.lane, Number(r.generation)), { discard: true })
      ),
      Effect.catch((e) => Effect.logWarning(`Generations heartbeat failed: ${e.message}`)),
      Effect.repeat(Schedule.spaced(Duration.millis(heartbeatMs))),
      Effect.forkScoped
    )
    const notifications = yield* sql.listen(channel)
    yield* Queue.take(notifications).pipe(
      Effect.flatMap((n) => {
        const at = n.payload.lastIndexOf(":")
        return at < 0 ? Effect.void : applyNewer(n.payload.slice(0, at), Number(n.payload.slice(at + 1)))
      }),
      Effect.forever,
      Effect.catchCause((cause) => Effect.logWarning("Generations listener stopped; polling goes on", cause)),
      Effect.forkScoped
    )
    // Leaving: others stop waiting for this member at once.
    yield* Effect.addFinalizer(() => Effect.ignore(sql.unsafe(`DELETE FROM ${members} WHERE member = $1`, [member])))

    const generations: Generations = {
      member,
      current: (lane) => local.get(lane) ?? 0,
      bump: (lane) =>
        Effect.gen(function*() {
          const rows = yield* sql.unsafe<{ readonly generation: number }>(
            `INSERT INTO ${gens} (lane, generation) VALUES ($1, 1)
             ON CONFLICT (lane) DO UPDATE SET generation = ${gens}.generation + 1
             RETURNING generation::float8 AS generation`,
            [lane]
          )
          const generation = Number(rows[0].generation)
          yield* sql.notify(channel, `${lane}:${generation}`)
          yield* applyNewer(lane, generation)
          return generation
        }),
      refresh: (lane) =>
        Effect.gen(function*() {
          const rows = yield* sql.unsafe<{ readonly generation: number }>(
            `SELECT generation::float8 AS generation FROM ${gens} WHERE lane = $1`,
            [lane]
          )
          const generation = rows.length === 0 ? 0 : Number(rows[0].generation)
          yield* applyNewer(lane, generation)
          return local.get(lane) ?? 0
        }),
      awaitApplied: (lane, generation, timeoutMs) =>
        Effect.gen(function*() {
          const deadline = Date.now() + timeoutMs
          while (true) {
            const rows = yield* sql.unsafe<{ readonly behind: number }>(
              `SELECT count(*)::float8 AS behind FROM ${members}
               WHERE seen_at > $1 AND COALESCE((applied->>$2)::bigint, 0) < $3`,
              [Date.now() - memberTtlMs, lane, generation]
            )
            if (Number(rows[0].behind) === 0) return true
            if (Date.now() >= deadline) return false
            yield* Effect.sleep(Duration.millis(25))
          }
        }),
      members: Effect.map(
        Effect.suspend(() =>
          sql.unsafe<{ readonly member: string; readonly seen_at: number; readonly applied: Record<string, number> }>(
            `SELECT member, seen_at::float8 AS seen_at, applied FROM ${members} WHERE seen_at > $1 ORDER BY member`,
            [Date.now() - memberTtlMs]
          )
        ),
        (rows) =>
          rows.map((r) => ({
            member: r.member,
            seenAgoMs: Date.now() - Number(r.seen_at),
            applied: Object.fromEntries(Object.entries(r.applied ?? {}).map(([k, v]) => [k, Number(v)]))
          }))
      )
    }
    return generations
  })
