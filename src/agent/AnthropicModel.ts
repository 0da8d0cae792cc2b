/**
 * The `Model` that talks to Claude through the Messages API with the official
 * `@anthropic-ai/sdk`, streaming.
 *
 * - The API key is held as a `Redacted` and unwrapped only to construct the SDK client; the
 *   service, the layer and every `ModelError` print without it.
 * - Interrupting `reply` aborts the HTTP request (and any retry wait) through an `AbortSignal`.
 * - SDK failures become a `ModelError` with a short message (see {@link toModelError}).
 * - The SDK retries 408, 409, 429, 5xx (529 included) and connection failures `maxRetries` times
 *   (default 2) with backoff, honouring `retry-after`; the `ModelError` comes after the last try.
 *   Each failed try that will be tried again is told to `request.onRetry` (sdkRetries.ts: a request
 *   middleware watches the SDK's tries), so a person is not left waiting out a 20 s `retry-after` in silence.
 *
 * The SDK is loaded when the layer is built, so a program that only uses `ScriptedModel` never
 * loads it.
 */
import type * as AnthropicSdk from "@anthropic-ai/sdk"
import type { Anthropic as AnthropicClient } from "@anthropic-ai/sdk"
import type { MessageCreateParamsNonStreaming } from "@anthropic-ai/sdk/resources/messages"
import { Effect, Layer, Redacted } from "effect"
import type { Context } from "effect"
import { CommandQueue } from "../queue/index.js"
import {
  Model,
  ModelError,
  type ModelErrorReason,
  type ModelReply,
  type ModelRequest,
  type TranscriptMessage
} from "./Model.js"
import { CallbackFailed, retryWatcher } from "./sdkRetries.js"

/** Options of {@link layer}. */
export interface AnthropicModelOptions {
  /** The API key; a plain string is wrapped in a `Redacted` at once. */
  readonly apiKey: Redacted.Redacted<string> | string
  /** The Claude model id (default {@link DEFAULT_MODEL}). */
  readonly model?: string
  /** The API's base URL; when not given the SDK reads `ANTHROPIC_BASE_URL`, then uses https://api.anthropic.com. */
  readonly baseURL?: string
  /** An upper bound on `max_tokens`: a request asks for `min(request.maxTokens, maxTokens)`. */
  readonly maxTokens?: number
  /** How many times the SDK retries a retryable failure (default 2; 0 turns retries off). */
  readonly maxRetries?: number
  /** Stream the reply (default `true`). Without streaming `onText` is called once with the whole text. */
  readonly stream?: boolean
}

/** The model used when none is given: a current Claude Sonnet. */
export const DEFAULT_MODEL = "claude-sonnet-5-5"

/** How many times a retryable failure is retried when `maxRetries` is not given (the SDK's default). */
export const DEFAULT_MAX_RETRIES = 2

/** The user message put first when a transcript starts with an assistant message (the API wants a user first). */
export const CONTINUATION_PROMPT = "(The conversation continues.)"

// ---- validation (p-queue's tone; never echoes the key) -----------------------------------------

const describe = (value: unknown): string => `\`${String(value)}\` (${typeof value})`

const validate = (options: AnthropicModelOptions) => {
  const { apiKey, model, baseURL, maxTokens, maxRetries } = options
  const key = Redacted.isRedacted(apiKey) ? (apiKey as Redacted.Redacted<string>) : Redacted.make(apiKey)
  const raw: unknown = Redacted.value(key)
  if (typeof raw !== "string" || raw.trim().length === 0) {
    throw new TypeError("Expected `apiKey` to be a non-empty string (its value is not shown)")
  }
  if (model !== undefined && (typeof model !== "string" || model.length === 0)) {
    throw new TypeError(`Expected \`model\` to be a non-empty string, got ${describe(model)}`)
  }
  if (baseURL !== undefined && (typeof baseURL !== "string" || !URL.canParse(baseURL))) {
    throw new TypeError(`Expected \`baseURL\` to be a URL, got ${describe(baseURL)}`)
  }
  if (maxTokens !== undefined && !(Number.isInteger(maxTokens) && maxTokens >= 1)) {
    throw new TypeError(`Expected \`maxTokens\` to be an integer from 1 and up, got ${describe(maxTokens)}`)
  }
  if (maxRetries !== undefined && !(Number.isInteger(maxRetries) && maxRetries >= 0)) {
    throw new TypeError(`Expected \`maxRetries\` to be an integer from 0 and up, got ${describe(maxRetries)}`)
  }
  return key
}

// ---- transcript -> messages --------------------------------------------------------------------

/**
 * One entry of the Messages API's `messages`, as {@link toMessages} builds it (a text-only `MessageParam`
 * of `@anthropic-ai/sdk`). Declared here so the published types do not need the optional SDK installed.
 */
export interface AnthropicMessage {
  role: "user" | "assistant"
  content: string
}

/**
 * Maps a transcript onto Messages API `messages`: empty messages are dropped, consecutive
 * messages of one role are merged (joined by a blank line) so roles alternate, and a transcript
 * that starts with an assistant message gets {@link CONTINUATION_PROMPT} before it.
 */
export const toMessages = (transcript: ReadonlyArray<TranscriptMessage>): Array<AnthropicMessage> => {
  const out: Array<AnthropicMessage> = []
  for (const message of transcript) {
    if (message.content.trim().length === 0) continue
    const last = out[out.length - 1]
    if (last !== undefined && last.role === message.role) {
      last.content = `${last.content}\n\n${message.content}`
    } else {
      out.push({ role: message.role, content: message.content })
    }
  }
  if (out.length > 0 && out[0]!.role === "assistant") out.unshift({ role: "user", content: CONTINUATION_PROMPT })
  return out
}

// ---- errors ------------------------------------------------------------------------------------

type Sdk = typeof AnthropicSdk

const byStatus = (status: number): { readonly reason: ModelErrorReason; readonly retryable: boolean } => {
  if (status === 401 || status === 403) return { reason: "auth", retryable: false }
  if (status === 429) return { reason: "rate-limit", retryable: true }
  if (status === 529 || status === 503) return { reason: "overloaded", retryable: true }
  if (status === 408 || status === 504) return { reason: "timeout", retryable: true }
  if (status === 400 || status === 404 || status === 413 || status === 422) {
    return { reason: "invalid-request", retryable: false }
  }
  if (status >= 500) return { reason: "unknown", retryable: true }
  return { reason: "unknown", retryable: false }
}

/** For an error that came inside a stream (no HTTP status): the API's error type decides. */
const reasonOf = (status: number): ModelErrorReason => byStatus(status).reason

const byType = (type: string | null): { readonly reason: ModelErrorReason; readonly retryable: boolean } => {
  switch (type) {
    case "authentication_error":
    case "permission_error":
      return { reason: "auth", retryable: false }
    case "rate_limit_error":
      return { reason: "rate-limit", retryable: true }
    case "overloaded_error":
      return { reason: "overloaded", retryable: true }
    case "timeout_error":
      return { reason: "timeout", retryable: true }
    case "invalid_request_error":
    case "not_found_error":
      return { reason: "invalid-request", retryable: false }
    case "api_error":
      return { reason: "unknown", retryable: true }
    default:
      return { reason: "unknown", retryable: false }
  }
}

const MAX_DETAIL = 200

const clip = (text: string): string => (text.length > MAX_DETAIL ? `${text.slice(0, MAX_DETAIL - 1)}…` : text)

/** The `code` of a connection failure (`ECONNREFUSED`, `ENOTFOUND`, ...), found along the cause chain. */
const errorCode = (error: unknown): string | undefined => {
  let current: unknown = error
  for (let depth = 0; depth < 5 && typeof current === "object" && current !== null; depth++) {
    const { code, cause } = current as { readonly code?: unknown; readonly cause?: unknown }
    if (typeof code === "string") return code
    current = cause
  }
  return undefined
}

/**
 * Maps what the SDK threw onto a `ModelError`: 401/403 auth, 429 rate-limit, 529/503 overloaded,
 * 408/504 and timeouts timeout, 400/404/413/422 invalid-request, connection failures network,
 * other 5xx unknown (retryable), anything else unknown. `secret` is scrubbed from the message.
 */
const toModelError = (sdk: Sdk, error: unknown, where: string, secret: string): ModelError => {
  let reason: ModelErrorReason = "unknown"
  let retryable = false
  let message: string
  if (error instanceof sdk.APIUserAbortError) {
    message = "the request to the Anthropic API was aborted"
  } else if (error instanceof sdk.APIConnectionTimeoutError) {
    reason = "timeout"
    retryable = true
    message = `the Anthropic API at ${where} did not answer in time`
  } else if (error instanceof sdk.APIConnectionError) {
    reason = "network"
    retryable = true
    const code = errorCode(error.cause)
    message = `cannot reach the Anthropic API at ${where}${code === undefined ? "" : ` (${code})`}`
  } else if (error instanceof sdk.APIError) {
    const mapped = typeof error.status === "number" ? byStatus(error.status) : byType(error.type)
    reason = mapped.reason
    retryable = mapped.retryable
    const head = typeof error.status === "number" ? `Anthropic API ${error.status}` : "Anthropic API stream error"
    const type = error.type === null ? "" : ` ${error.type}`
    const detail = error.apiMessage === null ? "" : `: ${clip(error.apiMessage)}`
    message = `${head}${type}${detail}`
  } else if (error instanceof IncompleteStream) {
    reason = "network"
    retryable = true
    message = `the reply stream from ${where} broke off before message_stop${
      error.code === undefined ? "" : ` (${error.code})`
    }`
  } else {
    const name = error instanceof Error ? error.name : typeof error
    const detail = error instanceof Error ? `: ${clip(error.message)}` : ""
    message = `Anthropic model call failed (${name}${detail})`
  }
  if (secret.length >= 4) message = message.split(secret).join("<redacted>")
  return new ModelError({ reason, message, retryable })
}

/** The stream ended without `message_stop` (the connection was cut mid-reply). */
class IncompleteStream extends Error {
  constructor(readonly code?: string) {
    super("incomplete stream")
  }
}

// ---- the layer ---------------------------------------------------------------------------------

const where = (baseURL: string): string => {
  try {
    return new URL(baseURL).host // never the userinfo or path of the URL
  } catch {
    return "the configured base URL"
  }
}

type Body = Omit<MessageCreateParamsNonStreaming, "stream">

const streamReply = async (
  client: AnthropicClient,
  body: Body,
  request: ModelRequest,
  signal: AbortSignal,
  progress: () => void,
  maxRetries: number
): Promise<ModelReply> => {
  const stream = await client.messages.create({ ...body, stream: true }, {
    signal,
    ...retryWatcher(request, maxRetries, signal, reasonOf)
  })
  let text = ""
  let stopReason: string | undefined
  let inputTokens = 0
  let outputTokens = 0
  let stopped = false
  try {
    for await (const event of stream) {
      // every event is progress: the queue's turn timeout restarts (a stuck stream is still cut)
      progress()
      switch (event.type) {
        case "message_start":
          inputTokens = event.message.usage.input_tokens
          outputTokens = event.message.usage.output_tokens
          break
        case "content_block_delta":
          if (event.delta.type === "text_delta") {
            text += event.delta.text
            emit(request, event.delta.text)
          }
          break
        case "message_delta":
          if (event.delta.stop_reason !== null) stopReason = event.delta.stop_reason
          outputTokens = event.usage.output_tokens
          if (typeof event.usage.input_tokens === "number") inputTokens = event.usage.input_tokens
          break
        case "message_stop":
          stopped = true
          break
      }
    }
  } catch (error) {
    // undici throws a bare TypeError ("terminated", cause UND_ERR_SOCKET) when the connection
    // drops mid-stream; the SDK's own errors and a failing onText go through as they are.
    if (signal.aborted || !(error instanceof TypeError)) throw error
    throw new IncompleteStream(errorCode(error))
  }
  if (!stopped && !signal.aborted) throw new IncompleteStream()
  return { text, ...(stopReason === undefined ? {} : { stopReason }), usage: { inputTokens, outputTokens } }
}

const wholeReply = async (
  client: AnthropicClient,
  body: Body,
  request: ModelRequest,
  signal: AbortSignal,
  maxRetries: number
): Promise<ModelReply> => {
  const message = await client.messages.create({ ...body, stream: false }, {
    signal,
    ...retryWatcher(request, maxRetries, signal, reasonOf)
  })
  let text = ""
  for (const block of message.content) if (block.type === "text") text += block.text
  if (text.length > 0) emit(request, text)
  return {
    text,
    ...(message.stop_reason === null ? {} : { stopReason: message.stop_reason }),
    usage: { inputTokens: message.usage.input_tokens, outputTokens: message.usage.output_tokens }
  }
}

const emit = (request: ModelRequest, chunk: string) => {
  if (request.onText === undefined) return
  try {
    request.onText(chunk)
  } catch (cause) {
    throw new CallbackFailed("onText", cause)
  }
}

/**
 * The `Model` layer that calls Claude. Throws a `TypeError` at once for an invalid option (the
 * key's value is never shown). The SDK client is built when the layer is; it reads
 * `ANTHROPIC_BASE_URL` when `baseURL` is not given.
 */
export const layer = (options: AnthropicModelOptions): Layer.Layer<Model> => {
  const apiKey = validate(options)
  const model = options.model ?? DEFAULT_MODEL
  const maxRetries = options.maxRetries ?? DEFAULT_MAX_RETRIES
  const maxTokensCap = options.maxTokens
  const baseURL = options.baseURL
  const streaming = options.stream ?? true
  return Layer.effect(
    Model,
    Effect.gen(function*() {
      const sdk: Sdk = yield* Effect.tryPromise({
        try: () => import("@anthropic-ai/sdk"),
        catch: (cause) =>
          new Error("AnthropicModel needs the package `@anthropic-ai/sdk`: npm install @anthropic-ai/sdk", { cause })
      }).pipe(Effect.orDie)
      const client = new sdk.Anthropic({
        apiKey: Redacted.value(apiKey),
        maxRetries,
        ...(baseURL === undefined ? {} : { baseURL })
      })
      const host = where(client.baseURL)
      const secret = Redacted.value(apiKey)
      const reply = (request: ModelRequest): Effect.Effect<ModelReply, ModelError> => {
        const messages = toMessages(request.transcript)
        if (messages.length === 0) {
          return Effect.fail(
            new ModelError({
              reason: "invalid-request",
              message: "the transcript has no message to answer",
              retryable: false
            })
          )
        }
        if (!(Number.isInteger(request.maxTokens) && request.maxTokens >= 1)) {
          return Effect.fail(
            new ModelError({
              reason: "invalid-request",
              message: `Expected \`maxTokens\` to be an integer from 1 and up, got \`${String(request.maxTokens)}\``,
              retryable: false
            })
          )
        }
        const body: Body = {
          model,
          max_tokens: maxTokensCap === undefined ? request.maxTokens : Math.min(maxTokensCap, request.maxTokens),
          messages,
          ...(request.system.trim().length === 0 ? {} : { system: request.system })
        }
        return Effect.contextWith((context: Context.Context<never>) => {
          // inside a queue task, each streamed event restarts its turnTimeoutMs (CommandQueue.keepAlive)
          const progress = () => Effect.runSyncWith(context)(CommandQueue.keepAlive)
          return Effect.tryPromise({
            try: (signal) =>
              streaming
                ? streamReply(client, body, request, signal, progress, maxRetries)
                : wholeReply(client, body, request, signal, maxRetries),
            catch: (error) => error
          })
        }).pipe(
          Effect.catch((error) =>
            error instanceof CallbackFailed
              ? Effect.die(error.cause)
              : Effect.fail(toModelError(sdk, error, host, secret))
          )
        )
      }
      return Model.of({ reply })
    })
  )
}
