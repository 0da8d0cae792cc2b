/**
 * The ingress's request checks and JSON refusals (Ingress.ts serves the routes): the `?wait=` and session
 * checks, the constant-time token compare, the loopback test for a runner without a token, and the
 * wrapper that turns what the API's decoding refused (and unknown routes) into JSON errors
 * `{ _tag, error, reason }` (docs/cluster.md "The runner's HTTP API").
 */
import { Cause, Effect, Exit } from "effect"
import { HttpServerRequest, HttpServerResponse } from "effect/http"
import { HttpApiError } from "effect/http-api"
import * as nodeCrypto from "node:crypto"
import { reservedSession } from "./ClusterAgent.js"

export type Reply = readonly [status: number, body: unknown]

const NOT_FOUND =
  "Expected one of POST /sessions/:id/messages, POST /sessions/:id/cancel, POST /lanes/:lane/restart, GET /lanes, POST /lanes/:lane/pause, POST /lanes/:lane/resume, PUT /lanes/:lane/limits, GET /status, GET /metrics, GET /openapi.json, GET /healthz"

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

/** The typed failure of an exit (its first `Fail`), if any. */
export const failureOf = (exit: Exit.Exit<unknown, unknown>) => {
  if (Exit.isSuccess(exit)) return undefined
  const f = exit.cause.reasons.find((r) => r._tag === "Fail")
  return f !== undefined && f._tag === "Fail"
    ? (f.error as { _tag?: string; message?: string; reason?: string })
    : undefined
}

/**
 * Why a message could not be taken, for its 500 and the runner's log: the first line of the failure
 * (Postgres out of reach: `PgConnection: Failed to connect`), at most 200 characters.
 */
export const notTakenWhy = (exit: Exit.Exit<unknown, unknown>): string => {
  if (Exit.isSuccess(exit)) return "no failure"
  const err = failureOf(exit)
  const text = typeof err?.message === "string" && err.message.trim() !== "" ? err.message : Cause.pretty(exit.cause)
  const first = text.split("\n").map((l) => l.trim()).find((l) => l !== "") ?? "an unknown failure"
  return first.length > 200 ? `${first.slice(0, 200)}...` : first
}

/** `a === b` in time that does not depend on where they differ (equal-length SHA-256 digests). */
export const sameToken = (a: string, b: string): boolean =>
  nodeCrypto.timingSafeEqual(
    nodeCrypto.createHash("sha256").update(a).digest(),
    nodeCrypto.createHash("sha256").update(b).digest()
  )

/**
 * The credential of an `Authorization: Bearer <credential>` header (the scheme in any case, one or more
 * spaces after it, as `effect/http-api`'s bearer security reads it), or `undefined`.
 */
export const bearerOf = (header: string | undefined): string | undefined => {
  const match = header === undefined ? null : /^bearer +(.+)$/i.exec(header)
  return match === null ? undefined : match[1]
}

/** True when no token is set, or the request's bearer credential is the token (constant time). */
export const authorized = (header: string | undefined, token: string | undefined): boolean => {
  if (token === undefined) return true
  const bearer = bearerOf(header)
  return bearer !== undefined && sameToken(bearer, token)
}

/** The one route a request may take without the token: `GET` (or `HEAD`) `/healthz`, no more. */
export const tokenFree = (method: string | undefined, url: string | undefined): boolean =>
  (method === "GET" || method === "HEAD") && (url ?? "").split("?", 1)[0] === "/healthz"

/** The 401 of a request without the token, as JSON with the `_tag` and `reason` of the API's `Unauthorized`. */
export const UNAUTHORIZED = JSON.stringify({
  _tag: "Unauthorized",
  error: "Expected `Authorization: Bearer <the runner's token>`, got none or another",
  reason: "unauthorized"
})

/** True for a host only this machine can reach (`127.0.0.0/8`, `::1`, `localhost`). */
export const isLoopback = (host: string): boolean =>
  host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)

const TAGS: Record<string, string> = {
  invalid: "RequestInvalid",
  reserved: "RequestInvalid",
  "too-large": "TooLarge",
  "not-found": "NotFound",
  internal: "Internal"
}
const errorBody = (status: number, error: string, reason: string) =>
  HttpServerResponse.jsonUnsafe({ _tag: TAGS[reason] ?? "RequestInvalid", error, reason }, { status })
const replyBody = (reply: Reply) => {
  const body = reply[1] as { error: string; reason: string }
  return errorBody(reply[0], body.error, body.reason)
}

/**
 * Turns what the API's decoding refused (and unknown routes) into JSON errors `{ error, reason }`,
 * with the same messages as the checks of {@link parseSession} and {@link parseWait}.
 */
export const errorsAsJson =
  (maxWaitMs: number, maxBody: number) => <E, R>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
    Effect.catchCause(app, (cause) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const url = new URL(request.url, "http://ingress")
        const failure = cause.reasons.find((r) => r._tag === "Fail" || r._tag === "Die")
        const e = (failure === undefined ? undefined : failure._tag === "Fail" ? failure.error : failure.defect) as {
          _tag?: string
          kind?: string
        } | undefined
        const server = e?._tag === "HttpServerError"
          ? (e as { reason?: { _tag?: string; reason?: string } }).reason
          : undefined
        const reason = server !== undefined ? server._tag : e?._tag
        // A POST to a session path the router could not match: its session name does not decode.
        const route = request.method === "POST"
          ? url.pathname.match(/^\/sessions\/([^/]+)\/(?:messages|cancel)$/)
          : null
        if (
          (HttpApiError.HttpApiSchemaError.is(e) && e.kind === "Params") ||
          (reason === "RouteNotFound" && route !== null)
        ) {
          const parsed = route === null ? undefined : parseSession(route[1])
          if (parsed !== undefined && typeof parsed !== "string") return replyBody(parsed)
          return errorBody(400, `Expected a URL-encoded path, got \`${url.pathname}\``, "invalid")
        }
        if (HttpApiError.HttpApiSchemaError.is(e)) {
          if (e.kind === "Query") {
            const waitMs = parseWait(url.searchParams.get("wait"), maxWaitMs)
            if (typeof waitMs !== "number") return replyBody(waitMs)
          }
          const shape = /^\/lanes\/[^/]+\/limits$/.test(url.pathname)
            ? `{ "concurrent"?: <integer from 1>, "queued"?: <integer from 0> }`
            : `{ "text": <non-empty string>, "id"?: <string> }`
          return errorBody(
            400,
            // The schema's message with its path on the same line (`... at ["bogus"]`).
            `Expected a JSON body \`${shape}\` (${e.kind}: ${
              e.cause.message.split("\n").slice(0, 2).join(" ").replace(/\s+/g, " ")
            })`,
            "invalid"
          )
        }
        // Over MaxBodySize: the node server's body reader fails RequestParseError "BodyTooLarge".
        if (
          HttpApiError.HttpApiPayloadTooLarge.is(e) ||
          (reason === "RequestParseError" && server?.reason === "BodyTooLarge")
        ) {
          return errorBody(413, `Expected a body of at most ${maxBody} bytes, got more`, "too-large")
        }
        if (reason === "RouteNotFound") {
          return errorBody(404, `${NOT_FOUND}, got ${request.method} ${url.pathname}`, "not-found")
        }
        if (reason === "RequestParseError") {
          return errorBody(400, "Expected a JSON body, got text that does not parse", "invalid")
        }
        if (Cause.hasInterruptsOnly(cause)) {
          return yield* Effect.failCause(cause)
        }
        yield* Effect.logWarning("Ingress request failed", cause)
        return errorBody(500, "internal error", "internal")
      }))
