/**
 * Postgres for the cluster tests: a fresh database per test file (dropped afterwards), and one clear
 * skip line when Postgres is unreachable (a failure under `CI=true`).
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll } from "vitest"
import * as Postgres from "../../src/cluster/Postgres.js"

/** The server the tests use; override with `SWITCHYARD_TEST_PG` (a URL of a database to connect to first). */
export const ADMIN_URL = process.env.SWITCHYARD_TEST_PG ?? "postgres://postgres@127.0.0.1:5432/test"

const probe = (url: string): Promise<boolean> =>
  new Promise((resolve) => {
    const u = new URL(url)
    const socket = net.connect({ host: u.hostname, port: Number(u.port || 5432) })
    const done = (ok: boolean) => {
      socket.destroy()
      resolve(ok)
    }
    socket.setTimeout(1500, () => done(false))
    socket.once("connect", () => done(true))
    socket.once("error", () => done(false))
  })

/** True when Postgres answers; logs the one skip line otherwise, and throws under `CI=true`. */
export const postgresAvailable = async (file: string): Promise<boolean> => {
  const ok = await probe(ADMIN_URL).then((up) =>
    up ? Effect.runPromise(Postgres.withClient(ADMIN_URL, (sql) => sql`SELECT 1`)).then(() => true, () => false) : false
  )
  if (ok) return true
  const line = `Postgres not reachable at ${
    Postgres.redactUrl(ADMIN_URL)
  }: the cluster tests (test/cluster) are skipped`
  if (process.env.CI === "true") throw new Error(`[${file}] ${line} (CI=true: a skip is a failure)`)
  // One line per test run, not per file: the first file of this vitest run (the workers' parent) says it.
  try {
    fs.writeFileSync(path.join(os.tmpdir(), `switchyard-pg-skip-${process.ppid}`), "", { flag: "wx", mode: 0o600 })
    console.warn(line)
  } catch {
    // another file of this run said it already
  }
  return false
}

/** Creates a database of its own; returns its URL and a drop function (which ends its sessions first). */
export const freshDatabase = async (
  tag: string
): Promise<{ readonly url: string; readonly drop: () => Promise<void> }> => {
  const name = `sy_${tag}_${process.pid}_${Math.floor(Math.random() * 1e9)}`.toLowerCase().replace(/[^a-z0-9_]/g, "_")
  await Effect.runPromise(Postgres.withClient(ADMIN_URL, (sql) => sql.unsafe(`CREATE DATABASE ${name}`)))
  const u = new URL(ADMIN_URL)
  u.pathname = `/${name}`
  return {
    url: u.toString(),
    drop: async () => {
      // A backend can connect between the terminate and the drop (a runner reconnecting): try again.
      for (let attempt = 1;; attempt++) {
        try {
          await Effect.runPromise(Postgres.withClient(ADMIN_URL, (sql) =>
            Effect.gen(function*() {
              yield* sql.unsafe(
                `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${name}' AND pid <> pg_backend_pid()`
              )
              yield* sql.unsafe(`DROP DATABASE IF EXISTS ${name}`)
            })))
          return
        } catch (e) {
          if (attempt >= 5) throw e
          await new Promise((r) => setTimeout(r, 200 * attempt))
        }
      }
    }
  }
}

/**
 * A database of its own for the tests of the enclosing `describe`: created before them, dropped after them.
 * Read `url` inside a test (or a hook that runs after this one).
 */
export const useFreshDatabase = (tag: string): { readonly url: string } => {
  let db: Awaited<ReturnType<typeof freshDatabase>> | undefined
  beforeAll(async () => {
    db = await freshDatabase(tag)
  }, 30_000)
  afterAll(async () => {
    await db?.drop()
  })
  return {
    get url() {
      if (db === undefined) throw new Error(`the database "${tag}" is made in beforeAll: read its url in a test`)
      return db.url
    }
  }
}

/** Runs one SQL statement on `url` (a connection of its own) and returns its rows. */
export const query = <A extends object>(url: string, text: string, params: ReadonlyArray<unknown> = []) =>
  Effect.runPromise(Postgres.withClient(url, (sql) => sql.unsafe<A>(text, params)))
