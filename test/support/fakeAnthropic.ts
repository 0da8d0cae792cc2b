/**
 * A local fake of the Anthropic Messages API for tests: `node:http` on 127.0.0.1, a random port.
 * It answers `POST /v1/messages` streamed (SSE: message_start, content_block_start, ping,
 * content_block_delta text_delta..., content_block_stop, message_delta, message_stop) or not
 * (one JSON Message), as the request's `stream` field asks.
 *
 * Script it per test with `enqueue(...)` (one scripted response per request, first in first out);
 * when the queue is empty, `respond` decides (default: `Fake Claude heard: <last user text>`).
 * It records every request (headers, parsed body) and notices connections the client closed
 * before the response ended (`aborted`).
 *
 * Point the SDK at it with `baseURL: fake.url`, or a child process with `ANTHROPIC_BASE_URL`.
 *
 * ```ts
 * const fake = await FakeAnthropic.start()
 * fake.enqueue(FakeAnthropic.error(529), FakeAnthropic.text("hello"))
 * // ... run the code under test against fake.url ...
 * await fake.close()
 * ```
 * or in Effect code: `const fake = yield* FakeAnthropic.scoped()` (closed with the Scope).
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"

/** What the fake answers to one request. */
export type FakeResponse =
  | {
    /** A successful reply: streamed as text deltas (one per chunk) or as one JSON message. */
    readonly type: "text"
    readonly text: string
    /** The text deltas of a streamed reply (default: the text split into words). Must join to `text`. */
    readonly chunks?: ReadonlyArray<string>
    readonly stopReason?: string
    /** Wait this long before answering at all. */
    readonly delayMs?: number
    /** Wait this long between two streamed chunks. */
    readonly chunkDelayMs?: number
    /** Awaited before each streamed chunk after the first (a test's latch: it says when the next one goes). */
    readonly beforeChunk?: (index: number) => Promise<void>
  }
  | {
    /** An HTTP error answer with the API's error body `{ type: "error", error: { type, message } }`. */
    readonly type: "error"
    readonly status: number
    readonly errorType: string
    readonly message: string
    readonly headers?: Readonly<Record<string, string>>
    readonly delayMs?: number
  }
  | {
    /** A 200 SSE stream that sends `textBefore` (if any), then an `error` event, then ends. */
    readonly type: "stream-error"
    readonly textBefore?: string
    readonly errorType: string
    readonly message: string
  }
  | {
    /**
     * A 200 SSE stream cut before `message_stop`: after `textBefore`, the response ends cleanly
     * (`destroy: false`) or the socket is destroyed (`destroy: true`).
     */
    readonly type: "cut"
    readonly textBefore: string
    readonly destroy: boolean
  }
  | {
    /**
     * Never finishes. With `textBefore`, first sends the stream's head and that text delta (so the
     * client is mid-stream); without it, not even the status line.
     */
    readonly type: "hang"
    readonly textBefore?: string
  }

/** One request the fake received. */
export interface RecordedRequest {
  readonly method: string
  readonly path: string
  /** Lower-case header names, as Node gives them. */
  readonly headers: http.IncomingHttpHeaders
  /** The parsed JSON body (or the raw text when it is not JSON). */
  readonly body: any
  /** Which scripted response answered it. */
  readonly response: FakeResponse
  /** Set when the client closed the connection before the response ended. */
  aborted: boolean
  /** Set when the response was sent completely. */
  finished: boolean
}

/** Options of {@link start}. */
export interface FakeAnthropicOptions {
  /** Answers a request when the queue of scripted responses is empty. */
  readonly respond?: (body: any) => FakeResponse
}

/** A running fake Messages API. */
export interface FakeAnthropic {
  /** The base URL, e.g. `http://127.0.0.1:41234` (what `baseURL` / `ANTHROPIC_BASE_URL` take). */
  readonly url: string
  /** Queues scripted responses; each request takes the next one. */
  readonly enqueue: (...responses: ReadonlyArray<FakeResponse>) => void
  /** Every request received so far, in order. */
  readonly requests: ReadonlyArray<RecordedRequest>
  /** Resolves once `count` requests have been received (at once if they have). */
  readonly waitForRequests: (count: number) => Promise<ReadonlyArray<RecordedRequest>>
  /** Resolves once `count` requests have been aborted by the client. */
  readonly waitForAborts: (count: number) => Promise<ReadonlyArray<RecordedRequest>>
  /** Closes the server and every open connection. */
  readonly close: () => Promise<void>
}

// ---- response constructors -------------------------------------------------------------------

/** A successful reply with `text`. */
export const text = (
  value: string,
  options: Omit<Extract<FakeResponse, { type: "text" }>, "type" | "text"> = {}
): FakeResponse => ({
  type: "text",
  text: value,
  ...options
})

const defaultErrorType = (status: number): string => {
  switch (status) {
    case 400:
    case 413:
    case 422:
      return "invalid_request_error"
    case 401:
      return "authentication_error"
    case 403:
      return "permission_error"
    case 404:
      return "not_found_error"
    case 429:
      return "rate_limit_error"
    case 504:
      return "timeout_error"
    case 529:
      return "overloaded_error"
    default:
      return "api_error"
  }
}

/**
 * An HTTP error answer. The error type defaults to the API's type for the status (529
 * `overloaded_error`, 429 `rate_limit_error`, 401 `authentication_error`, ...). Retryable answers
 * carry `retry-after-ms: 1` unless `headers` says otherwise, so SDK retries in tests are quick.
 */
export const error = (
  status: number,
  options: {
    readonly errorType?: string
    readonly message?: string
    readonly headers?: Readonly<Record<string, string>>
    readonly delayMs?: number
  } = {}
): FakeResponse => ({
  type: "error",
  status,
  errorType: options.errorType ?? defaultErrorType(status),
  message: options.message ?? `fake ${status}`,
  headers: options.headers ?? { "retry-after-ms": "1" },
  ...(options.delayMs === undefined ? {} : { delayMs: options.delayMs })
})

/** A 429 with `retry-after` (seconds) as the API sends it. */
export const rateLimited = (retryAfterSeconds = 1): FakeResponse =>
  error(429, {
    message: "Number of request tokens has exceeded your rate limit.",
    headers: { "retry-after": String(retryAfterSeconds) }
  })

/** A 529 `overloaded_error`, retried quickly by the SDK (`retry-after-ms: 1`). */
export const overloaded = (): FakeResponse => error(529, { message: "Overloaded" })

/** A response that never finishes (to test that interruption aborts the request). */
export const hang = (textBefore?: string): FakeResponse =>
  textBefore === undefined ? { type: "hang" } : { type: "hang", textBefore }

/** A streamed answer that fails part way with an SSE `error` event. */
export const streamError = (
  errorType = "overloaded_error",
  message = "Overloaded",
  textBefore?: string
): FakeResponse =>
  textBefore === undefined
    ? { type: "stream-error", errorType, message }
    : { type: "stream-error", errorType, message, textBefore }

/** A streamed reply cut after `textBefore`, before `message_stop` (socket destroyed when `destroy`). */
export const cut = (textBefore: string, destroy = false): FakeResponse => ({ type: "cut", textBefore, destroy })

/** The text of the last user message of a Messages API request body. */
export const lastUserText = (body: any): string => {
  const messages: Array<any> = Array.isArray(body?.messages) ? body.messages : []
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i]
    if (message?.role !== "user") continue
    if (typeof message.content === "string") return message.content
    if (Array.isArray(message.content)) {
      return message.content.filter((b: any) => b?.type === "text").map((b: any) => b.text).join("\n")
    }
  }
  return ""
}

/** The default answer: `Fake Claude heard: <last user text>`. */
export const echo = (body: any): FakeResponse => text(`Fake Claude heard: ${lastUserText(body)}`)

// ---- the server --------------------------------------------------------------------------------

const wordsOf = (value: string): Array<string> => (value.length === 0 ? [] : value.split(/(?<=\s)(?=\S)/))

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const sse = (res: http.ServerResponse, event: string, data: unknown) => {
  res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)
}

let messageCounter = 0

const usageOf = (input: number, output: number) => ({
  input_tokens: input,
  output_tokens: output,
  cache_creation_input_tokens: null,
  cache_read_input_tokens: null,
  cache_creation: null,
  server_tool_use: null,
  service_tier: "standard"
})

const messageShell = (model: string, content: Array<unknown>, stopReason: string | null, output: number) => ({
  id: `msg_fake_${++messageCounter}`,
  type: "message",
  role: "assistant",
  model,
  content,
  stop_reason: stopReason,
  stop_sequence: null,
  container: null,
  usage: usageOf(10, output)
})

const writeStreamHead = (res: http.ServerResponse, model: string) => {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", "request-id": "req_fake" })
  sse(res, "message_start", { type: "message_start", message: messageShell(model, [], null, 1) })
  sse(res, "content_block_start", {
    type: "content_block_start",
    index: 0,
    content_block: { type: "text", text: "", citations: null }
  })
  sse(res, "ping", { type: "ping" })
}

const textDelta = (res: http.ServerResponse, chunk: string) =>
  sse(res, "content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: chunk } })

const answer = async (res: http.ServerResponse, request: RecordedRequest, isOpen: () => boolean) => {
  const response = request.response
  const body = request.body ?? {}
  const model = typeof body.model === "string" ? body.model : "claude-fake"
  const stream = body.stream === true
  switch (response.type) {
    case "hang": {
      if (response.textBefore !== undefined) {
        writeStreamHead(res, model)
        textDelta(res, response.textBefore)
      }
      return // never end
    }
    case "error": {
      if (response.delayMs) await sleep(response.delayMs)
      if (!isOpen()) return
      res.writeHead(response.status, {
        "content-type": "application/json",
        "request-id": "req_fake",
        ...response.headers
      })
      res.end(
        JSON.stringify({
          type: "error",
          error: { type: response.errorType, message: response.message },
          request_id: "req_fake"
        })
      )
      return
    }
    case "cut": {
      writeStreamHead(res, model)
      request.finished = true // the fake ends it on purpose: not a client abort
      if (!response.destroy) {
        textDelta(res, response.textBefore)
        res.end()
        return
      }
      // Destroy only once the head and the text are flushed, so the client is mid-stream.
      res.write(
        `event: content_block_delta\ndata: ${
          JSON.stringify({
            type: "content_block_delta",
            index: 0,
            delta: { type: "text_delta", text: response.textBefore }
          })
        }\n\n`,
        () => {
          res.socket?.destroy()
        }
      )
      return
    }
    case "stream-error": {
      writeStreamHead(res, model)
      if (response.textBefore !== undefined) textDelta(res, response.textBefore)
      sse(res, "error", { type: "error", error: { type: response.errorType, message: response.message } })
      res.end()
      return
    }
    case "text": {
      if (response.delayMs) await sleep(response.delayMs)
      if (!isOpen()) return
      const stopReason = response.stopReason ?? "end_turn"
      const chunks = response.chunks ?? wordsOf(response.text)
      if (!stream) {
        res.writeHead(200, { "content-type": "application/json", "request-id": "req_fake" })
        res.end(
          JSON.stringify(
            messageShell(model, [{ type: "text", text: response.text, citations: null }], stopReason, chunks.length)
          )
        )
        return
      }
      writeStreamHead(res, model)
      for (let i = 0; i < chunks.length; i++) {
        if (i > 0 && response.chunkDelayMs) await sleep(response.chunkDelayMs)
        if (i > 0 && response.beforeChunk) await response.beforeChunk(i)
        if (!isOpen()) return
        textDelta(res, chunks[i]!)
      }
      sse(res, "content_block_stop", { type: "content_block_stop", index: 0 })
      sse(res, "message_delta", {
        type: "message_delta",
        delta: { stop_reason: stopReason, stop_sequence: null, container: null, stop_details: null },
        usage: {
          output_tokens: chunks.length,
          input_tokens: null,
          cache_creation_input_tokens: null,
          cache_read_input_tokens: null,
          server_tool_use: null
        }
      })
      sse(res, "message_stop", { type: "message_stop" })
      res.end()
      return
    }
  }
}

/** Starts a fake Messages API on 127.0.0.1 (a free port). */
export const start = (options: FakeAnthropicOptions = {}): Promise<FakeAnthropic> => {
  const respond = options.respond ?? echo
  const queue: Array<FakeResponse> = []
  const requests: Array<RecordedRequest> = []
  let abortCount = 0
  const waiters = new Set<() => void>()
  const notify = () => {
    for (const waiter of waiters) waiter()
  }
  const waitUntil = <A>(ready: () => A | undefined): Promise<A> =>
    new Promise((resolve) => {
      const check = () => {
        const value = ready()
        if (value !== undefined) {
          waiters.delete(check)
          resolve(value)
        }
      }
      waiters.add(check)
      check()
    })

  const server = http.createServer((req, res) => {
    const parts: Array<Buffer> = []
    req.on("data", (part: Buffer) => parts.push(part))
    req.on("end", () => {
      const raw = Buffer.concat(parts).toString("utf8")
      let body: any = raw
      try {
        body = raw.length > 0 ? JSON.parse(raw) : undefined
      } catch {
        // keep the raw text
      }
      const path = (req.url ?? "/").split("?")[0]!
      if (req.method !== "POST" || path !== "/v1/messages") {
        res.writeHead(404, { "content-type": "application/json" })
        res.end(
          JSON.stringify({
            type: "error",
            error: { type: "not_found_error", message: `fake: no route ${req.method} ${path}` }
          })
        )
        return
      }
      const recorded: RecordedRequest = {
        method: req.method,
        path,
        headers: req.headers,
        body,
        response: queue.shift() ?? respond(body),
        aborted: false,
        finished: false
      }
      requests.push(recorded)
      res.on("finish", () => {
        recorded.finished = true
      })
      res.on("close", () => {
        if (!recorded.finished && !recorded.aborted) {
          recorded.aborted = true
          abortCount++
          notify()
        }
      })
      notify()
      void answer(res, recorded, () => !res.destroyed && !recorded.aborted)
    })
  })

  return new Promise((resolve, reject) => {
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      resolve({
        url: `http://127.0.0.1:${port}`,
        enqueue: (...responses) => {
          queue.push(...responses)
        },
        requests,
        waitForRequests: (count) => waitUntil(() => (requests.length >= count ? requests.slice() : undefined)),
        waitForAborts: (count) =>
          waitUntil(() => (abortCount >= count ? requests.filter((r) => r.aborted) : undefined)),
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections()
            server.close(() => done())
          })
      })
    })
  })
}

/** {@link start} as a scoped Effect: the server closes when the Scope does. */
export const scoped = (options: FakeAnthropicOptions = {}): Effect.Effect<FakeAnthropic, never, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.promise(() => start(options)),
    (fake) => Effect.promise(() => fake.close())
  )
