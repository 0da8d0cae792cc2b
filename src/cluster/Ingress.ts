/**
 * The runner's HTTP ingress: the `effect/http-api` definition of IngressApi.ts (Schema-validated
 * params, query and bodies, typed errors) served by a node:http server through
 * `@effect/platform-node/NodeHttpServer.makeHandler` (the server stays ours for the drain below).
 * docs/cluster.md "The runner's HTTP API" is the reference:
 *
 * - `POST /sessions/:id/messages` with `{ "text": "...", "id"?: "..." }` dispatches a turn on lane
 *   `main` keyed by the session. 202 `{ runId, session, runner }` once the message is durable in the
 *   cluster. With `?wait=<ms>` it waits up to that long for the reply: 200 `{ runId, session, runner,
 *   reply }`, or 202 with `pending: true` when the reply did not come in time (the message is still
 *   answered, through the outbox). A client `id` makes the run id `msg:<session>:<id>`: sending the
 *   same message again (after a timeout, to another runner) joins the first run instead of adding one.
 * - `POST /sessions/:id/cancel`: cancels the session's turns dispatched before it, wherever they run
 *   or wait (their waiting clients get 502 `canceled`); 200 `{ session, canceled: true }`.
 * - `POST /lanes/:lane/restart`: `restartLane` for the whole cluster; 200 `{ lane, generation }` once
 *   every live runner applied it (the runs of older generations failed `stale`).
 * - `GET /lanes`, `POST /lanes/:lane/pause`, `POST /lanes/:lane/resume`, `PUT /lanes/:lane/limits`
 *   (`{ concurrent?, queued? }`): this runner's own lanes (IngressLanes.ts); the others keep theirs.
 * - `GET /status`: this runner's shards and resident entities, its lanes, the cluster's live members,
 *   counters, delivery stats (JSON). `GET /metrics`: the same in Prometheus text.
 * - `GET /openapi.json`: the OpenAPI document of the API.
 * - `GET /healthz`: 200 while the runner takes messages, 503 once it stops.
 *
 * With a token every request but `GET /healthz` wants `Authorization: Bearer <token>`: without it, 401
 * before routing (an unknown path or a bad body says nothing about the routes); without a token the
 * ingress refuses to listen on an address that is not loopback.
 * Every error is JSON `{ "_tag", "error": "<what was expected, what was given>", "reason": "..." }`.
 * On shutdown (`stopAccepting`, then `close`) new messages get 503 `closed` while requests already
 * waiting for a reply keep their connection until they are answered.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { ByteSize, Deferred, Effect, Exit, Layer, Option, Redacted, Schema } from "effect"
import type { Scope } from "effect"
import { HttpIncomingMessage, HttpRouter, HttpServerResponse } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import * as http from "node:http"
import * as Answers from "./Answers.js"
import type { ClusterDelivery } from "./ClusterDelivery.js"
import type { ClusterQueue } from "./ClusterQueue.js"
import type { RunNowPayload } from "./ClusterQueueTypes.js"
import { RUNS_PATH } from "./Hop.js"
import type * as Inbox from "./Inbox.js"
import * as IngressApi from "./IngressApi.js"
import {
  authorized,
  errorsAsJson,
  failureOf,
  isLoopback,
  notTakenWhy,
  sameToken,
  tokenFree,
  UNAUTHORIZED
} from "./IngressChecks.js"
import * as IngressHop from "./IngressHop.js"
import * as IngressLanes from "./IngressLanes.js"
import type { PgDeliveryLog } from "./PgDeliveryLog.js"
import { RunNow } from "./protocol.js"
import { metricsText, status } from "./RunnerStatus.js"
import * as Timing from "./Timing.js"

/** Options of {@link serve}. */
export interface IngressOptions {
  readonly queue: ClusterQueue
  readonly delivery: ClusterDelivery
  readonly outbox: PgDeliveryLog
  /** The agent's inbox: messages of a session that arrive while its turn runs are answered together. Without it, one turn per message. */
  readonly inbox?: Inbox.Inbox
  readonly port: number
  /** Default `127.0.0.1`. */
  readonly host?: string
  /** Largest request body, default 64 KiB. */
  readonly maxBodyBytes?: number
  /** Longest `?wait=` accepted, default 60_000 ms (more is a 400). */
  readonly maxWaitMs?: number
  /**
   * Bearer token every route but `/healthz` requires (`Authorization: Bearer <token>`), compared in
   * constant time. Without one the ingress listens on loopback addresses only.
   */
  readonly token?: string
  /**
   * The transcript rows a turn reads (the agent's history, two per turn): with it, a message to an idle
   * session is started by its slot statement, which returns them, and its turn reads nothing before the
   * model (Coalesce.ts `InboxMessage.history`). Default none: the turn reads them itself.
   */
  readonly historyRows?: number
  /**
   * Runs a volatile run sent by another runner's ingress (`POST /internal/runs`, Hop.ts) as a send to its
   * key's entity from here; without it that route is 404.
   */
  readonly relay?: (payload: RunNowPayload) => Effect.Effect<Exit.Exit<unknown, unknown>>
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

export { isLoopback, parseSession, parseWait, sameToken } from "./IngressChecks.js"

/** Serves the ingress for the Scope's lifetime; closing the Scope closes it (see {@link Ingress.close}). */
export const serve = (options: IngressOptions): Effect.Effect<Ingress, Error, Scope.Scope> =>
  Effect.gen(function*() {
    const maxBody = options.maxBodyBytes ?? 64 * 1024
    const maxWaitMs = options.maxWaitMs ?? 60_000
    const host = options.host ?? "127.0.0.1"
    const token = options.token === undefined || options.token === "" ? undefined : options.token
    if (token === undefined && !isLoopback(host)) {
      return yield* Effect.fail(
        new Error(
          `Expected a token (--token or SWITCHYARD_TOKEN) to listen on \`${host}\`, a non-loopback address, got none`
        )
      )
    }
    let accepting = true
    let inFlight = 0
    let idle: Deferred.Deferred<void> | undefined
    const api = IngressApi.make(maxWaitMs)
    const openApi = IngressApi.openApi(api)

    /**
     * A message's 200 (`Replied`) or 202 (`Accepted`) as the API's encoder writes it (the JSON text, its status,
     * `application/json`), built here: the hot route skips the Schema encode of a value this handler made.
     */
    const answer = (status: 200 | 202, body: typeof IngressApi.Replied.Type | typeof IngressApi.Accepted.Type) =>
      HttpServerResponse.text(JSON.stringify(body), { status, contentType: "application/json" })

    const message = (session: string, body: typeof IngressApi.MessageBody.Type, waitMs: number) =>
      Effect.gen(function*() {
        if (!accepting) {
          return yield* new IngressApi.Closed({
            error: "Expected a runner that takes messages, got one shutting down",
            reason: "closed"
          })
        }
        // A message joins the session's run that waits (answered together with the others that came while
        // the turn before it ran), recorded in the inbox for that run; a re-sent message id joins its run.
        // The slot, the inbox row and the lookup of the message id are one statement (Coalesce.ts).
        const inbox = options.inbox
        Timing.mark(session, "ingress")
        const dispatched = yield* Effect.exit(
          options.queue.dispatch(
            "main",
            session,
            { type: "message", session, text: body.text, inbox: inbox !== undefined },
            inbox === undefined
              ? (body.id === undefined ? {} : { runId: `msg:${session}:${body.id}` })
              : {
                coalesce: true,
                inbox: {
                  session,
                  text: body.text,
                  ...(body.id === undefined ? {} : { messageId: body.id }),
                  ...(options.historyRows === undefined ? {} : { history: options.historyRows })
                }
              }
          )
        )
        if (Exit.isFailure(dispatched)) {
          const err = failureOf(dispatched)
          if (err?._tag === "AdmissionError") {
            return yield* err.reason === "full"
              ? new IngressApi.Busy({ error: err.message ?? "full", reason: "full" })
              : new IngressApi.Closed({ error: err.message ?? "closed", reason: "closed" })
          }
          if (err?._tag === "RequestError") {
            return yield* new IngressApi.RequestInvalid({ error: err.message ?? "invalid", reason: "invalid" })
          }
          // Postgres out of reach, say: said to the client and in the log (it was a bare "dispatch failed").
          const why = notTakenWhy(dispatched)
          yield* Effect.logWarning(`ingress: a message to session ${session} was not taken: ${why}`)
          return yield* new IngressApi.Internal({
            error: `Could not take the message (${why}); it was not accepted: send it again`,
            reason: "internal"
          })
        }
        const future = dispatched.value
        const accepted = { runId: future.runId, session, runner: options.queue.member }
        if (waitMs <= 0) {
          return answer(202, accepted)
        }
        const outcome = yield* Effect.exit(future.awaitTimeout(`${waitMs} millis`))
        Timing.mark(future.runId, "respond")
        if (Exit.isSuccess(outcome)) return answer(200, { ...accepted, reply: outcome.value })
        const err = failureOf(outcome)
        // Not answered in time, or this runner stopped waiting (it shuts down): the run is durable and
        // answered through the outbox all the same.
        if (err?._tag === "FutureTimeout" || (err?._tag === "QueueFailure" && err.reason === "closed")) {
          return answer(202, { ...accepted, pending: true as const })
        }
        return yield* new IngressApi.TurnFailed({
          ...accepted,
          error: err?.message ?? "the turn failed",
          ...(err?.reason ? { reason: err.reason } : {})
        })
      })

    const runnerRoutes = HttpApiBuilder.group(api, "runner", (handlers) =>
      Effect.succeed(handlers.handleAll({
        message: ({ params, query, payload }) =>
          message(params.id, payload, query.wait === undefined ? 0 : Number(query.wait)),
        cancel: ({ params }) =>
          Effect.mapError(
            Effect.as(options.queue.cancel("main", params.id), { session: params.id, canceled: true as const }),
            (e) => new IngressApi.RequestInvalid({ error: e.message, reason: "invalid" })
          ),
        restart: ({ params }) =>
          Effect.mapError(
            Effect.map(options.queue.restartLane(params.lane), (generation) => ({ lane: params.lane, generation })),
            (e) => new IngressApi.RequestInvalid({ error: e.message, reason: "invalid" })
          ),
        status: () =>
          Effect.mapError(
            status(options),
            () => new IngressApi.Internal({ error: "status unavailable", reason: "internal" })
          ),
        metrics: () =>
          Effect.mapError(
            Effect.map(status(options), metricsText),
            () => new IngressApi.Internal({ error: "status unavailable", reason: "internal" })
          ),
        openapi: () => Effect.succeed(openApi)
      })))
    const healthRoutes = HttpApiBuilder.group(api, "health", (handlers) =>
      Effect.succeed(handlers.handleAll({
        healthz: () =>
          accepting
            ? Effect.succeed({ ok: true as const, runner: options.queue.member, pid: process.pid })
            : Effect.fail(new IngressApi.NotHealthy({ ok: false, runner: options.queue.member, pid: process.pid }))
      })))
    const authorization = Layer.succeed(IngressApi.Authorization, {
      bearer: (effect, { credential }) =>
        token === undefined || sameToken(Redacted.value(credential), token)
          ? effect
          : Effect.fail(
            new IngressApi.Unauthorized({
              error: "Expected `Authorization: Bearer <the runner's token>`, got none or another",
              reason: "unauthorized"
            })
          )
    })
    const routes = HttpApiBuilder.layer(api).pipe(
      Layer.provide([runnerRoutes, IngressLanes.routes(api, options.queue), healthRoutes]),
      Layer.provide(authorization),
      Layer.provide(NodeHttpServer.layerHttpServices)
    )
    const scope = yield* Effect.scope
    const app = yield* HttpRouter.toHttpEffect(routes)
    // The body limit is in the services every request starts from, not provided anew per request.
    const handle = yield* NodeHttpServer.makeHandler(errorsAsJson(maxWaitMs, maxBody)(app), { scope }).pipe(
      Effect.provideService(HttpIncomingMessage.MaxBodySize, ByteSize.bytes(maxBody))
    )

    const services = yield* Effect.context<never>()
    const decodeRun = Schema.decodeUnknownOption(RunNow.payloadSchema)
    /** `POST /internal/runs` (Hop.ts): another ingress's run, sent to its key's entity from here. */
    const relayed = (
      relay: (payload: RunNowPayload) => Effect.Effect<Exit.Exit<unknown, unknown>>,
      req: http.IncomingMessage,
      res: http.ServerResponse
    ) => {
      const reply = (status: number, body: string) => {
        if (res.writableEnded || res.destroyed) return
        res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
        res.end(body)
      }
      const refuse = (status: number, error: string) => {
        req.resume()
        reply(status, JSON.stringify({ error }))
      }
      if (req.method !== "POST") return refuse(405, "Expected POST")
      if (!accepting) return refuse(503, "Expected a runner that takes messages, got one shutting down")
      const chunks: Array<Buffer> = []
      let size = 0
      req.on("data", (c: Buffer) => {
        size += c.length
        if (size <= maxBody) chunks.push(c)
      })
      const arrived = Timing.enabled ? Timing.now() : 0
      req.on("end", () => {
        if (size > maxBody) return reply(413, JSON.stringify({ error: "body too large" }))
        let payload: Option.Option<RunNowPayload>
        try {
          payload = decodeRun(JSON.parse(Buffer.concat(chunks).toString("utf8")))
        } catch {
          payload = Option.none()
        }
        if (Option.isNone(payload)) return reply(400, JSON.stringify({ error: "Expected a run" }))
        const runId = payload.value.runId
        Timing.mark(runId, "relayArrived", arrived)
        Timing.mark(runId, "relayDecoded")
        // The run goes on if the sender stops waiting (only Cancel stops a run).
        void Effect.runPromiseWith(services)(relay(payload.value)).then((exit) => {
          Timing.mark(runId, "relayAnswered")
          const answer = Answers.encode(exit)
          return answer === undefined ? reply(502, JSON.stringify({ error: "no answer" })) : reply(200, answer)
        }, () => reply(502, JSON.stringify({ error: "no answer" })))
      })
    }

    /** Relayed runs (the hop's and `POST /internal/runs`') not answered yet: the drain waits for them too. */
    const done = () => {
      inFlight--
      if (inFlight === 0 && idle !== undefined) Deferred.doneUnsafe(idle, Effect.void)
    }
    const server = http.createServer((req, res) => {
      // Where a message's request meets the HTTP server and where its response is written (marked by
      // session, as the handler's "ingress" mark is; at `end` itself: "finish" comes after the write
      // completed, often after the client has the reply).
      if (Timing.enabled && req.method === "POST" && req.url?.startsWith("/sessions/") === true) {
        const session = req.url.split("/")[2] ?? ""
        Timing.mark(session, "httpIn")
        const end = res.end.bind(res) as (...args: Array<unknown>) => http.ServerResponse
        res.end = ((...args: Array<unknown>) => {
          Timing.mark(session, "httpOut")
          return end(...args)
        }) as typeof res.end
      }
      inFlight++
      res.once("close", done)
      // With a token, a request without it is refused before routing: whatever it asks (an unknown path,
      // a bad body), the answer is this 401 and says nothing of the routes. Only GET /healthz is open.
      if (!tokenFree(req.method, req.url) && !authorized(req.headers.authorization, token)) {
        req.resume()
        res.writeHead(401, {
          "content-type": "application/json",
          "content-length": Buffer.byteLength(UNAUTHORIZED),
          "www-authenticate": "Bearer"
        })
        return res.end(UNAUTHORIZED)
      }
      if (options.relay !== undefined && req.url === RUNS_PATH) return relayed(options.relay, req, res)
      if (!accepting) res.setHeader("connection", "close")
      // Bodies are JSON whatever the client labels them (`curl -d`, `fetch` with a string body).
      if (
        (req.method === "POST" || req.method === "PUT") &&
        !/^application\/json\b/i.test(req.headers["content-type"] ?? "")
      ) {
        req.headers["content-type"] = "application/json"
      }
      handle(req, res)
    })
    server.keepAliveTimeout = 5_000
    const hop = IngressHop.serve({
      server,
      token,
      relay: options.relay,
      maxLine: maxBody,
      accepting: () => accepting,
      decodeRun,
      run: Effect.runPromiseWith(services),
      started: () => void inFlight++,
      ended: done
    })

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
          hop.close()
          yield* Effect.promise(() => listening)
        }).pipe(Effect.ensuring(Deferred.succeed(done, undefined)))
      })

    yield* Effect.acquireRelease(
      Effect.callback<void, Error>((resume) => {
        server.once("error", (e) => resume(Effect.fail(e)))
        server.listen(options.port, host, () => resume(Effect.void))
      }),
      () => close(options.closeGraceMs ?? 10_000)
    )
    return { server, inFlight: () => inFlight, stopAccepting, close }
  })
