/**
 * Why a runner could not start, as one line that names what failed and how to fix it (the runner
 * command prints it instead of a stack trace): Postgres unreachable, a database or role that does not
 * exist, a `--postgres` that is not a URL, a port in use or not allowed. A failure of another kind is
 * named by its first message; `SWITCHYARD_DEBUG=1` prints the whole cause as well.
 */
import { Cause } from "effect"
import * as net from "node:net"
import { redactUrl } from "./Postgres.js"

/** What the line may name: the runner's Postgres URL and its two listeners. */
export interface StartupContext {
  readonly postgres: string
  readonly host: string
  readonly port: number
  readonly clusterPort: number
}

interface Link {
  readonly code?: unknown
  readonly message?: unknown
  readonly port?: unknown
  readonly address?: unknown
  readonly hostname?: unknown
  readonly cause?: unknown
}

/** The errors of `cause`, each followed by its chain of `cause`s (outermost first). */
const links = (cause: Cause.Cause<unknown>): ReadonlyArray<Link> => {
  const out: Array<Link> = []
  for (const reason of cause.reasons) {
    let e: unknown = reason._tag === "Fail" ? reason.error : reason._tag === "Die" ? reason.defect : undefined
    for (let depth = 0; typeof e === "object" && e !== null && depth < 8; depth++) {
      out.push(e as Link)
      e = (e as Link).cause
    }
  }
  return out
}

const where = (url: string): string => {
  try {
    const u = new URL(url)
    return `${u.hostname}:${u.port || "5432"}`
  } catch {
    return url
  }
}

/** The `createdb` command that makes the database of `url`. */
const createdb = (url: string): string => {
  const u = new URL(url)
  return [
    "createdb",
    `-h ${u.hostname}`,
    ...(u.port === "" ? [] : [`-p ${u.port}`]),
    ...(u.username === "" ? [] : [`-U ${decodeURIComponent(u.username)}`]),
    decodeURIComponent(u.pathname.slice(1))
  ].join(" ")
}

/** The flag that sets `port`, for the message. */
const flagOf = (port: number, ctx: StartupContext): string =>
  port === ctx.port
    ? "--port, the HTTP ingress"
    : port === ctx.clusterPort
    ? "--cluster-port, runner to runner; default --port + 1000"
    : "a listener of the runner"

/** One line (no trailing newline) that says what stopped the start and how to fix it. */
export const describe = (cause: Cause.Cause<unknown>, ctx: StartupContext): string => {
  const chain = links(cause)
  const pg = redactUrl(ctx.postgres)
  const withCode = (code: string) => chain.find((l) => l.code === code)
  const message = (l: Link | undefined) => (typeof l?.message === "string" ? l.message : "")

  const inUse = withCode("EADDRINUSE") ?? withCode("EACCES")
  if (inUse !== undefined) {
    const port = typeof inUse.port === "number" ? inUse.port : ctx.port
    const host = typeof inUse.address === "string" ? inUse.address : ctx.host
    return inUse.code === "EADDRINUSE"
      ? `cannot listen on ${host}:${port} (${
        flagOf(port, ctx)
      }): the port is in use by another process; stop it or pick another port`
      : `cannot listen on ${host}:${port} (${
        flagOf(port, ctx)
      }): not allowed (a port under 1024 needs privileges); pick a port from 1024 up`
  }
  if (withCode("ERR_INVALID_URL") !== undefined) {
    return `--postgres is not a Postgres URL: expected postgres://<user>@<host>:<port>/<database>`
  }
  const refused = withCode("ECONNREFUSED") ?? withCode("ETIMEDOUT") ?? withCode("EHOSTUNREACH")
  if (refused !== undefined) {
    return `cannot reach Postgres at ${where(ctx.postgres)} (${
      refused.code === "ECONNREFUSED" ? "connection refused" : String(refused.code)
    }): start Postgres there, or fix --postgres / SWITCHYARD_POSTGRES (got \`${pg}\`)`
  }
  const unknownHost = withCode("ENOTFOUND") ?? withCode("EAI_AGAIN")
  if (unknownHost !== undefined) {
    return `cannot reach Postgres: the host \`${
      typeof unknownHost.hostname === "string" ? unknownHost.hostname : where(ctx.postgres)
    }\` does not resolve; fix --postgres / SWITCHYARD_POSTGRES (got \`${pg}\`)`
  }
  const noDatabase = withCode("3D000")
  if (noDatabase !== undefined) {
    return `Postgres at ${where(ctx.postgres)}: ${message(noDatabase)}; create it (${
      createdb(ctx.postgres)
    }) or fix --postgres (got \`${pg}\`)`
  }
  const login = withCode("28000") ?? withCode("28P01")
  if (login !== undefined) {
    return `Postgres at ${where(ctx.postgres)} refused the login: ${
      message(login)
    }; fix the user or password in --postgres (got \`${pg}\`)`
  }
  const sqlState = chain.find((l) => typeof l.code === "string" && /^[0-9A-Z]{5}$/.test(l.code))
  if (sqlState !== undefined) {
    return `Postgres at ${where(ctx.postgres)} refused the start: ${message(sqlState)} (SQLSTATE ${
      String(sqlState.code)
    })`
  }
  // The innermost message is usually the one that says what happened.
  const last = [...chain].reverse().find((l) => message(l) !== "")
  const first = (last === undefined ? Cause.pretty(cause) : message(last)).split("\n")[0]
  return `failed to start: ${first} (SWITCHYARD_DEBUG=1 prints the whole cause)`
}

/**
 * Fails with the listen error (`EADDRINUSE`, `EACCES`) when `port` on `host` cannot be listened on
 * now; closes the probe at once. Racy by nature (another process may take the port right after): the
 * listener's own error is described the same way.
 */
export const probeListen = (host: string, port: number): Promise<void> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve()))
  })
