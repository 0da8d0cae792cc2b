/**
 * The runner's small HTTP ingress (plain node:http; docs/cluster.md "The runner's HTTP API" is the
 * reference):
 *
 * - `POST /sessions/:id/messages` with `{ "text": "...", "id"?: "..." }` dispatches a turn on lane
 *   `main` keyed by the session. 202 `{ runId, session, runner }` once the message is durable in the
 *   cluster. With `?wait=<ms>` it waits up to that long for the reply: 200 `{ runId, session, runner,
 *   reply }`, or 202 with `pending: true` when the reply did not come in time (the message is still
 *   answered, through the outbox). A client `id` makes the run id `msg:<session>:<id>`: sending the
 *   same message again (after a timeout, to another runner) joins the first run instead of adding one.
 * - `POST /lanes/:lane/restart`: `restartLane` for the whole cluster; 200 `{ lane, generation }` once
 *   every live runner applied it (the runs of older generations failed `stale`).
 * - `GET /status`: this runner's shards and resident entities, its lanes, the cluster's live members,
 *   counters, delivery stats (JSON). `GET /metrics`: the same in Prometheus text.
 * - `GET /healthz`: 200 while the runner takes messages, 503 once it stops.
 *
 * Every error is JSON `{ "error": "<what was expected, what was given>", "reason"?: "..." }`.
 * On shutdown (`stopAccepting`, then `close`) new messages get 503 `closed` while requests already
 * waiting for a reply keep their connection until they are answered.
 */
import { Deferred, Effect, Exit } from "effect"
import type { Scope } from "effect"
import * as http from "node:http"
import { reservedSession } from "./ClusterAgent.js"
import type { ClusterDelivery } from "./ClusterDelivery.js"
import type { ClusterQueue } from "./ClusterQueue.js"
import type { PgDeliveryLog } from "./PgDeliveryLog.js"
import { metricsText, status } from "./RunnerStatus.js"

/** Options of {@link serve}. */
export interface IngressOptions {
  readonly queue: ClusterQueue
  readonly delivery: ClusterDelivery
  readonly outbox: PgDeliveryLog
  readonly port: number
  /** Default `127.0.0.1`. */
  readonly host?: string
  /** Largest request body, default 64 KiB. */
  readonly maxBodyBytes?: number
  /** Longest `?wait=` accepted, default 60_000 ms (more is a 400). */
  readonly maxWaitMs?: number
  /** When the Scope closes without `close` called first, how long requests in flight may still finish; default 10_000 ms. */
  readonly closeGraceMs?: number
}

/** A serving ingress. */
export interface Ingress {
  readonly server: http.Server
  /** Requests received and not answered yet. */
  readonly inFlight: () => number
  /** From now on new messages get 503 (`reason: "closed"`) and `/healthz` 503; requests in flight go on. */
  readonly stopAccepting: Effect.Effect<void>
  /**
   * Stops accepting, waits until every request in flight was answered or `timeoutMs` passed, then
   * closes every connection and the listener. A second call waits for the first.
   */
  readonly close: (timeoutMs: number) => Effect.Effect<void>
}

type Reply = readonly [status: number, body: unknown]

const json = (res: http.ServerResponse, status: number, body: unknown) => {
  if (res.headersSent) return
  const text = JSON.stringify(body)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
  res.end(text)
}

const NOT_FOUND =
  "Expected one of POST /sessions/:id/messages, POST /lanes/:lane/restart, GET /status, GET /metrics, GET /healthz"

/** `?wait=` as milliseconds, or the 400 it earns. */
export const parseWait = (raw: string | null, maxWaitMs: number): number | Reply => {
  if (raw === null) return 0
  if (/^\d{1,9}$/.test(raw) && Number(raw) <= maxWaitMs) return Number(raw)
  return [400, {
    error: `Expected \`wait\` to be an integer of milliseconds from 0 to ${maxWaitMs}, got \`${raw}\``,
    reason: "invalid"
  }]
}

/** The session of `/sessions/:id/messages`, or the 400 it earns. */
export const parseSession = (raw: string): string | Reply => {
  let session: string
  try {
    session = decodeURIComponent(raw)
  } catch {
    return [400, { error: `Expected a URL-encoded session name, got \`${raw}\``, reason: "invalid" }]
  }
  const reserved = reservedSession(session)
  if (reserved !== undefined) {
    return [400, { error: `Expected a session name of your own, got \`${session}\`: ${reserved}`, reason: "reserved" }]
  }
  return session
}

const failureOf = (exit: Exit.Exit<unknown, unknown>) => {
  if (Exit.isSuccess(exit)) return undefined
  const f = exit.cause.reasons.find((r) => r._tag === "Fail")
  return f !== undefined && f._tag === "Fail"
    ? (f.error as { _tag?: string; message?: string; reason?: string })
    : undefined
}

/** Serves the ingress for the Scope's lifetime; closing the Scope closes it (see {@link Ingress.close}). */
export const serve = (options: IngressOptions): Effect.Effect<Ingress, Error, Scope.Scope> =>
  Effect.gen(function*() {
    const context = yield* Effect.context<never>()
    const run = Effect.runPromiseWith(context)
    const maxBody = options.maxBodyBytes ?? 64 * 1024
    const maxWaitMs = options.maxWaitMs ?? 60_000
    let accepting = true
    let inFlight = 0
    let idle: Deferred.Deferred<void> | undefined

    const onMessage = (session: string, body: unknown, waitMs: number): Effect.Effect<Reply> =>
      Effect.gen(function*() {
        const b = body as { text?: unknown; id?: unknown }
        if (typeof b !== "object" || b === null || typeof b.text !== "string" || b.text.length === 0) {
          return [400, {
            error: `Expected a JSON body \`{ "text": <non-empty string>, "id"?: <string> }\`, got \`${
              JSON.stringify(body)?.slice(0, 80)
            }\``,
            reason: "invalid"
          }]
        }
        if (b.id !== undefined && typeof b.id !== "string") {
          return [400, { error: `Expected \`id\` to be a string, got \`${JSON.stringify(b.id)}\``, reason: "invalid" }]
        }
        const dispatched = yield* Effect.exit(
          options.queue.dispatch("main", session, { type: "message", session, text: b.text }, {
            ...(b.id === undefined ? {} : { runId: `msg:${session}:${b.id}` })
          })
        )
        if (Exit.isFailure(dispatched)) {
          const err = failureOf(dispatched)
          if (err?._tag === "AdmissionError") {
            return [err.reason === "full" ? 429 : 503, { error: err.message, reason: err.reason }]
          }
          if (err?._tag === "RequestError") {
            return [400, { error: err.message, reason: "invalid" }]
          }
          return [500, { error: "dispatch failed", reason: "internal" }]
        }
        const future = dispatched.value
        const accepted = { runId: future.runId, session, runner: options.queue.member }
        if (waitMs <= 0) return [202, accepted]
        const outcome = yield* Effect.exit(future.awaitTimeout(`${waitMs} millis`))
        if (Exit.isSuccess(outcome)) return [200, { ...accepted, reply: outcome.value }]
        const err = failureOf(outcome)
        // Not answered in time, or this runner stopped waiting (it shuts down): the run is durable and
        // answered through the outbox all the same.
        if (err?._tag === "FutureTimeout" || (err?._tag === "QueueFailure" && err.reason === "closed")) {
          return [202, { ...accepted, pending: true }]
        }
        return [502, {
          ...accepted,
          error: err?.message ?? "the turn failed",
          ...(err?.reason ? { reason: err.reason } : {})
        }]
      })

    const answer = (res: http.ServerResponse, reply: Effect.Effect<Reply>) =>
      run(reply).then(
        ([code, out]) => json(res, code, out),
        () => json(res, 500, { error: "internal error", reason: "internal" })
      )

    const server = http.createServer((req, res) => {
      inFlight++
      res.once("close", () => {
        inFlight--
        if (inFlight === 0 && idle !== undefined) Deferred.doneUnsafe(idle, Effect.void)
      })
      if (!accepting) res.setHeader("connection", "close")
      const url = new URL(req.url ?? "/", "http://ingress")
      const route = url.pathname.match(/^\/sessions\/([^/]+)\/messages$/)
      if (req.method === "POST" && route) {
        if (!accepting) {
          return json(res, 503, {
            error: "Expected a runner that takes messages, got one shutting down",
            reason: "closed"
          })
        }
        const session = parseSession(route[1])
        if (typeof session !== "string") return json(res, session[0], session[1])
        const waitMs = parseWait(url.searchParams.get("wait"), maxWaitMs)
        if (typeof waitMs !== "number") return json(res, waitMs[0], waitMs[1])
        const chunks: Array<Buffer> = []
        let size = 0
        req.on("data", (c: Buffer) => {
          size += c.length
          if (size > maxBody) {
            json(res, 413, { error: `Expected a body of at most ${maxBody} bytes, got more`, reason: "too-large" })
            req.destroy()
          } else chunks.push(c)
        })
        req.on("end", () => {
          if (res.writableEnded) return
          let body: unknown
          try {
            body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
          } catch {
            return json(res, 400, { error: "Expected a JSON body, got text that does not parse", reason: "invalid" })
          }
          void answer(res, onMessage(session, body, waitMs))
        })
        return
      }
      const restart = url.pathname.match(/^\/lanes\/([^/]+)\/restart$/)
      if (req.method === "POST" && restart) {
        let lane: string
        try {
          lane = decodeURIComponent(restart[1])
        } catch {
          return json(res, 400, { error: `Expected a URL-encoded lane name, got \`${restart[1]}\``, reason: "invalid" })
        }
        void answer(
          res,
          Effect.map(Effect.exit(options.queue.restartLane(lane)), (exit): Reply =>
            Exit.isSuccess(exit)
              ? [200, { lane, generation: exit.value }]
              : [400, { error: failureOf(exit)?.message ?? `Unknown lane \`${lane}\``, reason: "invalid" }])
        )
        return
      }
      if (req.method === "GET" && (url.pathname === "/status" || url.pathname === "/metrics")) {
        run(status(options)).then(
          (s) => {
            if (url.pathname === "/status") return json(res, 200, s)
            const text = metricsText(s)
            res.writeHead(200, {
              "content-type": "text/plain; version=0.0.4; charset=utf-8",
              "content-length": Buffer.byteLength(text)
            })
            res.end(text)
          },
          () => json(res, 500, { error: "status unavailable", reason: "internal" })
        )
        return
      }
      if (req.method === "GET" && url.pathname === "/healthz") {
        return json(res, accepting ? 200 : 503, { ok: accepting, runner: options.queue.member, pid: process.pid })
      }
      json(res, 404, { error: `${NOT_FOUND}, got ${req.method} ${url.pathname}`, reason: "not-found" })
    })
    server.keepAliveTimeout = 5_000

    const stopAccepting = Effect.sync(() => {
      accepting = false
      server.closeIdleConnections()
    })
    let closed: Deferred.Deferred<void> | undefined
    const close = (timeoutMs: number): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (closed !== undefined) return Deferred.await(closed)
        const done = Deferred.makeUnsafe<void>()
        closed = done
        accepting = false
        return Effect.gen(function*() {
          // No new connections from here on; the callback runs once the last one ended.
          const listening = new Promise<void>((resolve) => server.close(() => resolve()))
          server.closeIdleConnections()
          if (inFlight > 0) {
            idle = Deferred.makeUnsafe<void>()
            yield* Deferred.await(idle).pipe(Effect.timeout(`${Math.max(0, timeoutMs)} millis`), Effect.ignore)
          }
          server.closeAllConnections()
          yield* Effect.promise(() => listening)
        }).pipe(Effect.ensuring(Deferred.succeed(done, undefined)))
      })

    yield* Effect.acquireRelease(
      Effect.callback<void, Error>((resume) => {
        server.once("error", (e) => resume(Effect.fail(e)))
        server.listen(options.port, options.host ?? "127.0.0.1", () => resume(Effect.void))
      }),
      () => close(options.closeGraceMs ?? 10_000)
    )
    return { server, inFlight: () => inFlight, stopAccepting, close }
  })
