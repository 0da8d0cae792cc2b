/**
 * The runner's HTTP API as an `effect/http-api` definition: every route, its Schema-validated
 * params, query and body, its answers and its typed errors (JSON `{ _tag, error, reason }` with the
 * status of the error). `GET /openapi.json` serves the OpenAPI document generated from it.
 * Every route but `/healthz` sits behind {@link Authorization} (a bearer token, when one is set).
 * Bodies are closed: a key a body does not declare is a 400 that names it.
 */
import { Schema } from "effect"
import {
  HttpApi,
  HttpApiEndpoint,
  HttpApiGroup,
  HttpApiMiddleware,
  HttpApiSchema,
  HttpApiSecurity,
  OpenApi
} from "effect/http-api"
import * as fs from "node:fs"
import { reservedSession } from "./ClusterAgent.js"

/** 400: a request that does not fit (`reason`: `invalid`, or `reserved` for the runner's own sessions). */
export class RequestInvalid extends Schema.TaggedError<RequestInvalid>()("RequestInvalid", {
  error: Schema.String,
  reason: Schema.Literals(["invalid", "reserved"])
}, { httpApiStatus: 400 }) {}

/** 401: a token is set and the request did not carry it (`Authorization: Bearer <token>`). */
export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", {
  error: Schema.String,
  reason: Schema.Literal("unauthorized")
}, { httpApiStatus: 401 }) {}

/** 413: a body over the ingress' limit. */
export class TooLarge extends Schema.TaggedError<TooLarge>()("TooLarge", {
  error: Schema.String,
  reason: Schema.Literal("too-large")
}, { httpApiStatus: 413 }) {}

/** 429: this runner holds as many messages of the lane as it may (`concurrent + queued`). */
export class Busy extends Schema.TaggedError<Busy>()("Busy", {
  error: Schema.String,
  reason: Schema.Literal("full")
}, { httpApiStatus: 429 }) {}

/** 503: the runner shuts down and takes no new messages. */
export class Closed extends Schema.TaggedError<Closed>()("Closed", {
  error: Schema.String,
  reason: Schema.Literal("closed")
}, { httpApiStatus: 503 }) {}

/** 502: the turn failed (the message was taken; the failure is its outcome). */
export class TurnFailed extends Schema.TaggedError<TurnFailed>()("TurnFailed", {
  runId: Schema.String,
  session: Schema.String,
  runner: Schema.String,
  error: Schema.String,
  reason: Schema.optional(Schema.String)
}, { httpApiStatus: 502 }) {}

/** 500: something this runner could not do (Postgres down, ...). */
export class Internal extends Schema.TaggedError<Internal>()("Internal", {
  error: Schema.String,
  reason: Schema.Literal("internal")
}, { httpApiStatus: 500 }) {}

/** 503 of `/healthz`: the runner stops. */
export class NotHealthy extends Schema.TaggedError<NotHealthy>()("NotHealthy", {
  ok: Schema.Literal(false),
  runner: Schema.String,
  pid: Schema.Number
}, { httpApiStatus: 503 }) {}

/** Why `?wait=` is not whole milliseconds from 0 to `maxWaitMs`, or `undefined`. */
export const waitProblem = (raw: string, maxWaitMs: number): string | undefined =>
  /^\d{1,9}$/.test(raw) && Number(raw) <= maxWaitMs
    ? undefined
    : `Expected \`wait\` to be an integer of milliseconds from 0 to ${maxWaitMs}, got \`${raw}\``

/** Why `session` is not a session a client may write to, or `undefined`. */
export const sessionProblem = (session: string): string | undefined => {
  const reserved = reservedSession(session)
  return reserved === undefined ? undefined : `Expected a session name of your own, got \`${session}\`: ${reserved}`
}

/** The body of `POST /sessions/:id/messages`. */
export const MessageBody = Schema.Struct({
  text: Schema.String.check(Schema.isNonEmpty()),
  /** A client message id: the run id becomes `msg:<session>:<id>`, so re-sending joins the first run. */
  id: Schema.optional(Schema.String)
})

/** The 202 of `POST /sessions/:id/messages`: the message is durable; no reply (yet). */
export const Accepted = Schema.Struct({
  runId: Schema.String,
  session: Schema.String,
  runner: Schema.String,
  /** Set when `?wait=` passed before the reply came: the message is answered through the outbox. */
  pending: Schema.optional(Schema.Literal(true))
}).pipe(HttpApiSchema.status(202))

/** The 200 of `POST /sessions/:id/messages?wait=`: the reply. */
export const Replied = Schema.Struct({
  runId: Schema.String,
  session: Schema.String,
  runner: Schema.String,
  reply: Schema.Unknown
})

/** The body of `PUT /lanes/:lane/limits`: this runner's new limits of the lane (at least one). */
export const LimitsBody = Schema.Struct({
  concurrent: Schema.optionalKey(Schema.Int.check(Schema.isGreaterThanOrEqualTo(1))),
  queued: Schema.optionalKey(Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)))
}).check(Schema.makeFilter((b) =>
  b.concurrent === undefined && b.queued === undefined
    ? "Expected at least one of `concurrent`, `queued`"
    : undefined
))

/** One lane of this runner, as `GET /lanes` gives it (the queue's `LaneSnapshot`, cluster generation). */
export const LaneView = Schema.Struct({
  lane: Schema.String,
  participation: Schema.Literals(["blocking", "background"]),
  generation: Schema.Number,
  running: Schema.Number,
  waiting: Schema.Number,
  keys: Schema.Number,
  concurrent: Schema.Number,
  queued: Schema.Number,
  draining: Schema.Boolean,
  paused: Schema.Boolean
})

const LanePaused = Schema.Struct({ lane: Schema.String, runner: Schema.String, paused: Schema.Boolean })
const LaneLimitsNow = Schema.Struct({
  lane: Schema.String,
  runner: Schema.String,
  concurrent: Schema.Number,
  queued: Schema.Number
})

/** The bearer token check of every route but `/healthz`. */
export class Authorization
  extends HttpApiMiddleware.Service<Authorization>()("switchyard/cluster/Ingress/Authorization", {
    security: { bearer: HttpApiSecurity.bearer },
    error: Unauthorized
  })
{}

/** The runner's HTTP API for a `?wait=` bound of `maxWaitMs`. */
export const make = (maxWaitMs: number) => {
  const Wait = Schema.String.check(Schema.makeFilter((raw: string) => waitProblem(raw, maxWaitMs)))
  const Session = Schema.String.check(Schema.makeFilter((s: string) => sessionProblem(s)))
  const runner = HttpApiGroup.make("runner", { topLevel: true })
    .add(
      HttpApiEndpoint.post("message", "/sessions/:id/messages", {
        params: { id: Session },
        query: { wait: Schema.optional(Wait) },
        payload: MessageBody,
        success: [Replied, Accepted],
        error: [RequestInvalid, TooLarge, Busy, Closed, TurnFailed, Internal]
      }),
      HttpApiEndpoint.post("cancel", "/sessions/:id/cancel", {
        params: { id: Session },
        success: Schema.Struct({ session: Schema.String, canceled: Schema.Literal(true) }),
        error: [RequestInvalid, Internal]
      }),
      HttpApiEndpoint.post("restart", "/lanes/:lane/restart", {
        params: { lane: Schema.String },
        success: Schema.Struct({ lane: Schema.String, generation: Schema.Number }),
        error: [RequestInvalid, Internal]
      }),
      HttpApiEndpoint.get("status", "/status", { success: Schema.Unknown, error: Internal }),
      HttpApiEndpoint.get("metrics", "/metrics", {
        success: Schema.String.pipe(HttpApiSchema.asText({ contentType: "text/plain; version=0.0.4; charset=utf-8" })),
        error: Internal
      }),
      HttpApiEndpoint.get("openapi", "/openapi.json", { success: Schema.Unknown })
    )
    .middleware(Authorization)
  // This runner's own lanes: pause, resume and limits act here only (docs/cluster.md).
  const lanes = HttpApiGroup.make("lanes", { topLevel: true })
    .add(
      HttpApiEndpoint.get("lanes", "/lanes", {
        success: Schema.Struct({ runner: Schema.String, lanes: Schema.Array(LaneView) }),
        error: Internal
      }),
      HttpApiEndpoint.post("pause", "/lanes/:lane/pause", {
        params: { lane: Schema.String },
        success: LanePaused,
        error: [RequestInvalid, Internal]
      }),
      HttpApiEndpoint.post("resume", "/lanes/:lane/resume", {
        params: { lane: Schema.String },
        success: LanePaused,
        error: [RequestInvalid, Internal]
      }),
      HttpApiEndpoint.put("limits", "/lanes/:lane/limits", {
        params: { lane: Schema.String },
        payload: LimitsBody,
        success: LaneLimitsNow,
        error: [RequestInvalid, TooLarge, Internal]
      })
    )
    .middleware(Authorization)
  const health = HttpApiGroup.make("health", { topLevel: true }).add(
    HttpApiEndpoint.get("healthz", "/healthz", {
      success: Schema.Struct({ ok: Schema.Literal(true), runner: Schema.String, pid: Schema.Number }),
      error: NotHealthy
    })
  )
  return HttpApi.make("switchyard-runner").add(runner).add(lanes).add(health)
    // A body with a key it does not declare is a 400 naming the key (the default drops such keys silently).
    .annotate(HttpApi.PayloadParseOptions, { onExcessProperty: "error" })
    .annotateMerge(OpenApi.annotations({
      title: "switchyard runner",
      version: packageVersion(),
      description: "One runner of a switchyard cluster: messages in, replies out (see docs/cluster.md)."
    }))
}

/** The package's version (package.json two folders up, from src/cluster/ as from dist/cluster/). */
const packageVersion = (): string =>
  (JSON.parse(fs.readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version

/** The OpenAPI document of {@link make}. */
export const openApi = (api: ReturnType<typeof make>) => OpenApi.fromApi(api)
