/**
 * The short way from an ingress to a key's owner, for the ingress's volatile runs (protocol.ts `RunNow`;
 * docs/cluster.md "One hop between runners"). effect/cluster sends a request to another runner over its
 * runners' socket: its RPC client and server, binary envelopes, the sharding's routing, ~1.7 ms of CPU over
 * both processes and 2 to 3 ms a round trip when they were idle (bench/README.md). Here the ingress POSTs
 * the run as JSON to the ingress of the runner that holds the key's shard (`POST /internal/runs`, one
 * keep-alive connection per request in flight), which hands it to the key's entity as a local send and
 * answers with the run's answer (`{"ok": ...}` or `{"err": ...}`, Answers.ts).
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
import { urlToHttpOptions } from "node:url"
import * as Answers from "./Answers.js"
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
}

/** The ingress's short way to shard owners, for the Scope's lifetime. */
export const make = (options: HopOptions): Effect.Effect<Hop, never, PgClient.PgClient | Scope.Scope> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const prefix = options.prefix ?? "switchyard"
    // The ingress URL of each shard's owner, other runners only.
    let owners = new Map<string, string>()
    yield* sql.unsafe<{ readonly shard: string; readonly url: string }>(
      `SELECT e.shard, o.url FROM ${prefix}_shard_epochs e JOIN ${prefix}_ingress_owners o ON o.owner = e.owner
       WHERE e.owner <> $1`,
      [options.self]
    ).pipe(
      Effect.tap((rows) =>
        Effect.sync(() => {
          owners = new Map(rows.map((r) => [r.shard, r.url]))
        })
      ),
      Effect.ignore,
      Effect.repeat(Schedule.spaced(Duration.millis(options.refreshMs ?? 1_000))),
      Effect.forkScoped
    )
    const agent = new http.Agent({ keepAlive: true })
    yield* Effect.addFinalizer(() => Effect.sync(() => agent.destroy()))
    const headers = {
      "content-type": "application/json",
      ...(options.token === undefined || options.token === "" ? {} : { authorization: `Bearer ${options.token}` })
    }
    let hops = 0
    let hopFailures = 0
    // An ingress that gave no answer is not asked again for a while (the usual way is taken at once).
    const failedUntil = new Map<string, number>()
    // The request options of each ingress, parsed from its URL once (not on every run sent to it).
    const targets = new Map<string, http.RequestOptions>()
    const targetOf = (url: string) => {
      let target = targets.get(url)
      if (target === undefined) {
        target = { ...urlToHttpOptions(new URL(`${url}${RUNS_PATH}`)), method: "POST", agent, headers }
        targets.set(url, target)
      }
      return target
    }
    const post = (url: string, body: string) =>
      Effect.callback<string | undefined>((resume) => {
        const req = http.request(targetOf(url), (res) => {
          const chunks: Array<Buffer> = []
          res.on("data", (c: Buffer) => chunks.push(c))
          res.on("end", () =>
            resume(Effect.succeed(res.statusCode === 200 ? Buffer.concat(chunks).toString("utf8") : undefined)))
          res.on("error", () =>
            resume(Effect.succeed(undefined)))
        })
        req.on("error", () => resume(Effect.succeed(undefined)))
        // A new connection that does not connect soon (an address these runners cannot reach) is dropped.
        req.on("socket", (socket) => {
          if (!socket.connecting) return
          const timer = setTimeout(() => req.destroy(), CONNECT_TIMEOUT_MS)
          socket.once("connect", () => clearTimeout(timer))
          socket.once("close", () => clearTimeout(timer))
        })
        req.end(body)
        // The run goes on where it runs (only Cancel stops it); this side stops waiting.
        return Effect.sync(() => req.destroy())
      })
    return {
      send: (shard, payload) => {
        const url = owners.get(shard)
        if (url === undefined || (failedUntil.get(url) ?? 0) > Date.now()) return Effect.succeed(undefined)
        Timing.mark(payload.runId, "hopSent")
        return Effect.map(post(url, JSON.stringify(payload)), (text) => {
          Timing.mark(payload.runId, "hopAnswered")
          if (text === undefined) {
            hopFailures++
            failedUntil.set(url, Date.now() + FAILURE_BACKOFF_MS)
            return undefined
          }
          try {
            const answer = Answers.decode(text)
            hops++
            return answer
          } catch {
            hopFailures++
            failedUntil.set(url, Date.now() + FAILURE_BACKOFF_MS)
            return undefined
          }
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
