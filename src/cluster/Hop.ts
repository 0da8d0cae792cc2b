/**
 * The short way from an ingress to a key's owner, for the ingress's volatile runs (protocol.ts `RunNow`;
 * docs/cluster.md "One hop between runners"). effect/cluster sends a request to another runner over its
 * runners' socket: its RPC client and server, binary envelopes, the sharding's routing, ~1.7 ms of CPU over
 * both processes and 2 to 3 ms a round trip when they were idle (bench/README.md). Here the ingress sends
 * the run as a line of JSON to the ingress of the runner that holds the key's shard, over one persistent
 * connection per other runner (an HTTP upgrade of `GET /internal/hop` on its ingress port, the bearer token
 * checked once per connection; HopWire.ts), which hands it to the key's entity as a local send and answers
 * with the run's answer (`{"ok": ...}` or `{"err": ...}`, Answers.ts) on a line with the same id. It used to
 * be a node:http request per run (`POST /internal/runs`, still served for a runner of an older version).
 *
 * Where a shard is: each runner registers its ingress URL under its fencing token
 * (`<prefix>_ingress_owners`, migration 0010) and every runner reads `<prefix>_shard_epochs` (whose `owner`
 * is the token of the runner that last acquired the shard, Fencing.ts) joined with it once a second.
 *
 * Nothing depends on that map being right, or on the request arriving: a run is recognised by its id
 * wherever it is sent (VolatileRuns.ts), its durability is its inbox row, and the owner's turn commits it
 * once (a fenced commit that writes nothing for an answered run). So when the map is stale the runner it
 * names forwards the run with effect/cluster's routing (a local send that is remote after all), and when the
 * request fails (no answer: the runner left, restarts, refuses) the caller sends the run the usual way.
 */
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Schedule } from "effect"
import type { Exit, Scope } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import * as http from "node:http"
import type * as net from "node:net"
import { urlToHttpOptions } from "node:url"
import * as Answers from "./Answers.js"
import * as HopWire from "./HopWire.js"
import type { RunNow } from "./protocol.js"
import * as Timing from "./Timing.js"

type RunNowPayload = typeof RunNow.payloadSchema.Type

/** The ingress route that takes a run for its key's entity on that runner (Ingress.ts). */
export const RUNS_PATH = "/internal/runs"

/** How long a new connection to another ingress may take before the run is sent the usual way. */
const CONNECT_TIMEOUT_MS = 1_000
/** How long an ingress that gave no answer is left alone. */
const FAILURE_BACKOFF_MS = 5_000

/** The ingress's short way to shard owners. */
export interface Hop {
  /**
   * The run's answer from the ingress of the runner that holds `shard`, or `undefined`: no other runner is
   * known to hold it (this one may), or the request got no answer. The caller then sends the run the
   * usual way (a run sent twice never runs twice).
   */
  readonly send: (shard: string, payload: RunNowPayload) => Effect.Effect<Exit.Exit<unknown, unknown> | undefined>
  /** Records this runner's ingress URL (`http://host:port`) under its fencing token. */
  readonly register: (url: string) => Effect.Effect<void, SqlError>
  /** Runs answered by the short way, and requests that got no answer. */
  readonly stats: () => { readonly hops: number; readonly hopFailures: number }
}

/** Options of {@link make}. */
export interface HopOptions {
  /** This process' fencing token (`Fence.token`). */
  readonly self: string
  /** The bearer token of the runners' ingress (every runner of a cluster uses the same), if any. */
  readonly token?: string
  /** switchyard's table prefix; default `switchyard`. */
  readonly prefix?: string
  /** How often the shards' owners are read; default 1_000 ms. */
  readonly refreshMs?: number
  /** Open the connection to a runner when it appears among the shards' owners; default true (else at its first run). */
  readonly eager?: boolean
}

/** The ingress's short way to shard owners, for the Scope's lifetime. */
export const make = (options: HopOptions): Effect.Effect<Hop, never, PgClient.PgClient | Scope.Scope> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const prefix = options.prefix ?? "switchyard"
    const headers = {
      connection: "Upgrade",
      upgrade: HopWire.HOP_PROTOCOL,
      ...(options.token === undefined || options.token === "" ? {} : { authorization: `Bearer ${options.token}` })
    }
    let hops = 0
    let hopFailures = 0
    // An ingress that gave no answer is not asked again for a while (the usual way is taken at once).
    const failedUntil = new Map<string, number>()
    // One connection per other ingress, opened when it appears among the owners (or at its first run) and
    // kept (HopWire.ts).
    const connections = new Map<string, Connection>()
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        for (const c of connections.values()) c.close()
      })
    )
    const connectionTo = (url: string): Connection => {
      let c = connections.get(url)
      if (c === undefined) {
        c = connect(url, headers, () => connections.delete(url))
        connections.set(url, c)
      }
      return c
    }
    // The ingress URL of each shard's owner, other runners only.
    let owners = new Map<string, string>()
    yield* sql.unsafe<{ readonly shard: string; readonly url: string }>(
      `SELECT e.shard, o.url FROM ${prefix}_shard_epochs e JOIN ${prefix}_ingress_owners o ON o.owner = e.owner
       WHERE e.owner <> $1`,
      [options.self]
    ).pipe(
      Effect.tap((rows) =>
        Effect.sync(() => {
          const before = new Set(owners.values())
          owners = new Map(rows.map((r) => [r.shard, r.url]))
          // A runner that appears among the owners gets its connection now, not at the first run sent
          // there (which would wait for the upgrade): once, when it appears.
          if (options.eager !== false) {
            for (const url of new Set(owners.values())) {
              if (!before.has(url) && (failedUntil.get(url) ?? 0) <= Date.now()) connectionTo(url)
            }
          }
        })
      ),
      Effect.ignore,
      Effect.repeat(Schedule.spaced(Duration.millis(options.refreshMs ?? 1_000))),
      Effect.forkScoped
    )
    const post = (url: string, body: string) =>
      Effect.callback<string | { readonly why: string }>((resume) => {
        const c = connectionTo(url)
        const id = c.send(body, (text, why) => resume(Effect.succeed(text ?? { why })))
        // The run goes on where it runs (only Cancel stops it); this side stops waiting.
        return Effect.sync(() => c.forget(id))
      })
    return {
      send: (shard, payload) => {
        const url = owners.get(shard)
        if (url === undefined || (failedUntil.get(url) ?? 0) > Date.now()) return Effect.succeed(undefined)
        Timing.mark(payload.runId, "hopSent")
        return Effect.flatMap(post(url, JSON.stringify(payload)), (text) => {
          Timing.mark(payload.runId, "hopAnswered")
          let answer: Exit.Exit<unknown, unknown> | undefined
          try {
            answer = typeof text === "string" ? Answers.decode(text) : undefined
          } catch {
            answer = undefined
          }
          if (answer !== undefined) {
            hops++
            return Effect.succeed(answer)
          }
          hopFailures++
          failedUntil.set(url, Date.now() + FAILURE_BACKOFF_MS)
          return Effect.as(
            Effect.logWarning(
              `hop: run ${payload.runId} got no answer from ${url} (${
                typeof text === "string" ? "not an answer" : text.why
              }); sent the usual way, and that ingress is left alone for ${FAILURE_BACKOFF_MS} ms`
            ),
            undefined
          )
        })
      },
      register: (url) =>
        Effect.asVoid(sql.unsafe(
          `INSERT INTO ${prefix}_ingress_owners (owner, url, registered_at) VALUES ($1, $2, $3)
           ON CONFLICT (owner) DO UPDATE SET url = EXCLUDED.url, registered_at = EXCLUDED.registered_at`,
          [options.self, url, Date.now()]
        )),
      stats: () => ({ hops, hopFailures })
    }
  })

/** A connection to another runner's ingress, upgraded to the hop's lines (HopWire.ts). */
interface Connection {
  /** Sends a run (its payload's JSON); `done` gets its answer's text, or `undefined` (no answer). Returns its id. */
  readonly send: (body: string, done: (text: string | undefined, why: string) => void) => number
  /** Stops waiting for request `id` (its answer, if it comes, is dropped). */
  readonly forget: (id: number) => void
  readonly close: () => void
}

/**
 * Opens a connection to the hop of the ingress at `url` (`GET /internal/hop`, upgraded); lines sent before it
 * is open wait for it. When it fails to open within {@link CONNECT_TIMEOUT_MS}, is refused (not upgraded: a
 * 401, a 503, an ingress without the hop) or ends, every request waiting on it gets `undefined` and `gone`
 * is called (the next run opens a new one).
 */
const connect = (url: string, headers: http.OutgoingHttpHeaders, gone: () => void): Connection => {
  const waiting = new Map<number, (text: string | undefined, why: string) => void>()
  let nextId = 0
  let socket: net.Socket | undefined
  let write: ((text: string) => void) | undefined
  let early = ""
  let ended: string | undefined
  const end = (why: string) => {
    if (ended !== undefined) return
    ended = why
    clearTimeout(timer)
    gone()
    socket?.destroy()
    req.destroy()
    const callbacks = [...waiting.values()]
    waiting.clear()
    for (const done of callbacks) done(undefined, why)
  }
  const req = http.request({
    ...urlToHttpOptions(new URL(`${url}${HopWire.HOP_PATH}`)),
    method: "GET",
    agent: false,
    headers
  })
  const timer = setTimeout(() => end(`not upgraded within ${CONNECT_TIMEOUT_MS} ms`), CONNECT_TIMEOUT_MS)
  req.on("upgrade", (res: http.IncomingMessage, s: net.Socket, head: Buffer) => {
    clearTimeout(timer)
    // Upgraded after the time allowed (the runs waiting were sent the usual way), or to something else.
    if (ended !== undefined) return void s.destroy()
    socket = s
    if (res.headers.upgrade !== HopWire.HOP_PROTOCOL) return end(`upgraded to ${res.headers.upgrade}`)
    s.setNoDelay(true)
    s.on("close", () => end("connection closed"))
    s.on("error", (e) => end(`connection failed: ${e.message}`))
    HopWire.readLines(s, head, Number.MAX_SAFE_INTEGER, (id, text) => {
      const done = waiting.get(id)
      if (done === undefined) return
      waiting.delete(id)
      done(text === HopWire.NO_ANSWER ? undefined : text, "no answer there")
    })
    write = HopWire.batched(s)
    if (early.length > 0) write(early)
    early = ""
  })
  // Answered but not upgraded (401, 404, 503): no hop there.
  req.on("response", (res: http.IncomingMessage) => {
    res.resume()
    end(`not upgraded: ${res.statusCode}`)
  })
  req.on("error", (e) => end(`connection failed: ${e.message}`))
  req.end()
  return {
    send: (body, done) => {
      const id = ++nextId
      if (ended !== undefined) {
        done(undefined, ended)
        return id
      }
      waiting.set(id, done)
      const text = HopWire.line(id, body)
      if (write === undefined) early += text
      else write(text)
      return id
    },
    forget: (id) => void waiting.delete(id),
    close: () => end("closed")
  }
}
