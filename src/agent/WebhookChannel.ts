/**
 * A channel that POSTs every entry to an HTTP endpoint (a webhook), over the global `fetch`.
 *
 * The request body is the JSON `{ id, channel, to, body }` of the entry and carries the header
 * `Idempotency-Key: <entry id>`: delivery is at least once, and the id is stable across retries and
 * restarts, so a receiver that remembers the keys it has seen drops a duplicate. A 2xx answer is
 * delivered; any other answer, a connection error or no answer within `timeoutMs` is a
 * `DeliveryFailure` carrying the HTTP `status` and the `Retry-After` header (`retryAfter` as given,
 * `retryAfterMs` read as seconds or an HTTP date) for the delivery queue's `classify` to decide on
 * (by default: 4xx permanent except 408, 409, 425 and 429; 5xx and connection errors retried; the
 * Retry-After replaces that attempt's backoff step). A redirect is permanent (`permanent: true`):
 * a webhook URL that moved is a wrong URL.
 */
import { Clock, Effect } from "effect"
import { DeliveryFailure, DeliveryQueue } from "../delivery/index.js"
import type { DeliveryEntry } from "../delivery/index.js"
import type { Channel } from "./Channel.js"
import { AgentConfigInvalid } from "./errors.js"
import { parseWebhookUrl } from "./webhookUrl.js"

export { parseWebhookUrl }

/** Options of {@link WebhookChannel}. */
export interface WebhookChannelOptions {
  /** The endpoint: an `http:` or `https:` URL. */
  readonly url: string
  /** Extra request headers (e.g. `Authorization`); never written to a log or an error. */
  readonly headers?: Readonly<Record<string, string>>
  /** An attempt without a complete answer after this long is aborted and fails, retryable (default 10 000). */
  readonly timeoutMs?: number
  /** The channel's name, written into every outbound message (default `"webhook"`). */
  readonly name?: string
}

/** The default bound of one POST, answer included. */
export const DEFAULT_WEBHOOK_TIMEOUT_MS = 10_000

/** How much of an error answer's body goes into the failure's message. */
const SNIPPET_CHARS = 200

/**
 * A channel that POSTs each entry as JSON `{ id, channel, to, body }` to `url` with
 * `Idempotency-Key: <entry id>` (see the module comment). Throws `AgentConfigInvalid` for a URL that
 * is not http(s) or a `timeoutMs` that is not a number above 0.
 */
export const WebhookChannel = (options: WebhookChannelOptions): Channel => {
  const url = parseWebhookUrl(options.url)
  if (typeof url === "string") throw new AgentConfigInvalid({ field: "url", message: url })
  const timeoutMs = options.timeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS
  if (typeof timeoutMs !== "number" || !(timeoutMs > 0)) {
    throw new AgentConfigInvalid({
      field: "timeoutMs",
      message: `Expected \`timeoutMs\` to be a number above 0, got \`${String(timeoutMs)}\``
    })
  }
  // Credentials in the URL go in an Authorization header (fetch refuses such a URL), unless one is given.
  const basic = url.username === "" && url.password === ""
    ? undefined
    : `Basic ${Buffer.from(`${decoded(url.username)}:${decoded(url.password)}`).toString("base64")}`
  url.username = ""
  url.password = ""
  const headersOf = (entry: DeliveryEntry): Headers => {
    const headers = new Headers(options.headers)
    if (basic !== undefined && !headers.has("authorization")) headers.set("authorization", basic)
    headers.set("content-type", "application/json")
    headers.set("idempotency-key", entry.id)
    return headers
  }
  // What messages name: no credentials, no query string (either may hold a secret).
  const where = `POST ${url.protocol}//${url.host}${url.pathname}`

  const send = (entry: DeliveryEntry): Effect.Effect<void, DeliveryFailure> =>
    Effect.gen(function*() {
      const payload = yield* Effect.try({
        try: () =>
          JSON.stringify({
            id: entry.id,
            channel: entry.message.channel,
            to: entry.message.to,
            body: entry.message.body
          }),
        catch: (cause) =>
          new DeliveryFailure({ message: `cannot encode entry ${entry.id} as JSON: ${String(cause)}`, permanent: true })
      })
      const answer = yield* Effect.tryPromise({
        // The signal aborts on interruption (the delivery queue's attempt timeout, a shutdown) and after `timeoutMs`.
        try: async (interrupted) => {
          // A timer of our own, not `AbortSignal.timeout` inside `AbortSignal.any`: nothing but a weak
          // reference holds that signal there, and a collection before it fires leaves the request unbounded.
          const controller = new AbortController()
          const onInterrupt = () => controller.abort(interrupted.reason)
          if (interrupted.aborted) onInterrupt()
          else interrupted.addEventListener("abort", onInterrupt, { once: true })
          const timer = setTimeout(
            () => controller.abort(new DOMException(`no answer within ${timeoutMs} ms`, "TimeoutError")),
            timeoutMs
          )
          try {
            const response = await fetch(url, {
              method: "POST",
              headers: headersOf(entry),
              body: payload,
              redirect: "manual",
              signal: controller.signal
            })
            // Read the whole answer within the same bound: the connection is free for the next entry.
            const text = await response.text()
            return {
              status: response.status,
              statusText: response.statusText,
              retryAfter: response.headers.get("retry-after"),
              location: response.headers.get("location"),
              text
            }
          } finally {
            clearTimeout(timer)
            interrupted.removeEventListener("abort", onInterrupt)
          }
        },
        catch: (cause) =>
          new DeliveryFailure({ message: `${where} failed: ${scrub(connectionError(cause, timeoutMs), url)}` })
      })
      if (answer.status >= 200 && answer.status < 300) return
      const retryAfter = answer.retryAfter ?? undefined
      // Read the header as the queue does (seconds, or an HTTP date from now): the failure carries both.
      const now = yield* Clock.currentTimeMillis
      const retryAfterMs = retryAfter === undefined
        ? undefined
        : DeliveryQueue.defaultClassify({ retryAfter }, undefined, now).retryAfterMs
      const said = snippet(answer.text)
      const message = `${where} answered ${answer.status}${answer.statusText === "" ? "" : ` ${answer.statusText}`}` +
        (retryAfter === undefined ? "" : ` (Retry-After: ${retryAfter})`) +
        (said === "" ? "" : `: ${said}`)
      if (answer.status >= 300 && answer.status < 400) {
        // A redirect will not change by itself: the URL is wrong.
        return yield* new DeliveryFailure({
          message: `${message}; webhooks are not redirected, use the final URL${
            answer.location === null ? "" : ` (Location: ${answer.location})`
          }`,
          permanent: true,
          status: answer.status
        })
      }
      // The queue's `classify` decides from the status: 4xx permanent except 408/409/425/429, 5xx retried.
      return yield* new DeliveryFailure({ message, status: answer.status, retryAfter, retryAfterMs })
    })
  return { name: options.name ?? "webhook", send }
}

/** A URL's user name or password as typed (percent-decoded when it decodes). */
const decoded = (part: string): string => {
  try {
    return decodeURIComponent(part)
  } catch {
    return part
  }
}

/** An error text without the URL's query string (it may hold a token). */
const scrub = (text: string, url: URL): string => (url.search === "" ? text : text.split(url.search).join("?..."))

const snippet = (text: string): string => {
  const line = text.replace(/\s+/g, " ").trim()
  return line.length <= SNIPPET_CHARS ? line : `${line.slice(0, SNIPPET_CHARS)}...`
}

const SOCKET_ERRORS: Record<string, string> = {
  ECONNREFUSED: "connection refused",
  ECONNRESET: "connection reset by the server",
  UND_ERR_SOCKET: "the server closed the connection",
  EPIPE: "the server closed the connection",
  ENOTFOUND: "no such host",
  EAI_AGAIN: "host name lookup failed, try again",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  ETIMEDOUT: "connection timed out",
  UND_ERR_CONNECT_TIMEOUT: "connection timed out"
}

/** Says why a request got no answer: no answer in time, or the connection's error code and words. */
const connectionError = (cause: unknown, timeoutMs: number): string => {
  if (cause instanceof Error && cause.name === "TimeoutError") return `no answer within ${timeoutMs} ms`
  if (cause instanceof Error && cause.name === "AbortError") return "aborted"
  const inner = cause instanceof Error && cause.cause instanceof Error ? cause.cause : cause
  const code = typeof inner === "object" && inner !== null && typeof (inner as { code?: unknown }).code === "string"
    ? (inner as { code: string }).code
    : undefined
  const text = inner instanceof Error ? inner.message : String(inner)
  if (code === undefined) return text
  return `${code} (${SOCKET_ERRORS[code] ?? text})`
}
