/** Postgres connection helpers shared by the cluster parts: one pool per process, from a URL. */
import { PgClient } from "@effect/sql-pg"
import type { Layer } from "effect"
import { Effect, Redacted } from "effect"
import type { SqlClient } from "effect/sql"
import type { SqlError } from "effect/sql/SqlError"

/** A `SqlClient` (and `PgClient`) layer for `url` (`postgres://user@host:port/db`); the URL is held redacted. */
export const layer = (
  url: string,
  options: {
    readonly maxConnections?: number
    /** Connections the pool keeps open when idle (it closes the others after 60 s unused); default 0. */
    readonly minConnections?: number
    readonly applicationName?: string
  } = {}
): Layer.Layer<PgClient.PgClient | SqlClient.SqlClient, SqlError> =>
  PgClient.layer({
    url: Redacted.make(url),
    maxConnections: options.maxConnections ?? 10,
    ...(options.minConnections === undefined ? {} : { minConnections: options.minConnections }),
    applicationName: options.applicationName ?? "switchyard",
    connectTimeout: "5 seconds"
  })

/** Runs `f` with a client of its own for `url`, closed afterwards. */
export const withClient = <A, E>(
  url: string,
  f: (sql: PgClient.PgClient) => Effect.Effect<A, E>
): Effect.Effect<A, E | SqlError> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    return yield* f(sql)
  }).pipe(Effect.provide(layer(url, { maxConnections: 1 })))

/** Hides the password of a Postgres URL, for logs and `/status`. */
export const redactUrl = (url: string): string => {
  try {
    const u = new URL(url)
    if (u.password) u.password = "***"
    return u.toString()
  } catch {
    return "<invalid url>"
  }
}
