/**
 * The Anthropic SDK's own retries, told to the caller: a request middleware that watches the tries of one
 * call and calls `request.onRetry` for each failed try the SDK makes again (the last failure is the
 * call's `ModelError`, not a retry). Whether the SDK retries, and how long it waits, are read as the SDK
 * reads them (its `shouldRetry` for an API key's requests, `retry-after-ms` / `retry-after`).
 */
import type { Middleware } from "@anthropic-ai/sdk"
import type { ModelErrorReason, ModelRequest, ModelRetry } from "./Model.js"

/** `onText` or `onRetry` threw: a bug in the caller, surfaced as a defect, not a `ModelError`. */
export class CallbackFailed extends Error {
  constructor(callback: "onText" | "onRetry", override readonly cause: unknown) {
    super(`${callback} threw`, { cause })
  }
}

/** Whether the SDK tries a failed answer again (its `shouldRetry` for an API key's requests). */
const sdkRetries = (response: Response): boolean => {
  const header = response.headers.get("x-should-retry")
  if (header === "true" || header === "false") return header === "true"
  return response.status === 408 || response.status === 409 || response.status === 429 || response.status >= 500
}

/** The wait the server asked for (`retry-after-ms`, `retry-after` in seconds or a date), as the SDK reads it. */
const retryAfterMs = (headers: Headers, now: number): number | undefined => {
  const ms = parseFloat(headers.get("retry-after-ms") ?? "")
  const header = headers.get("retry-after")
  const seconds = header === null ? NaN : parseFloat(header)
  const wait = !Number.isNaN(ms) && ms !== 0
    ? ms
    : header === null
    ? undefined
    : !Number.isNaN(seconds)
    ? seconds * 1000
    : Date.parse(header) - now
  return wait !== undefined && wait > 0 && wait <= 2 ** 31 - 1 ? Math.ceil(wait) : undefined
}

/**
 * A request middleware that tells `request.onRetry` of each failed try the SDK will make again
 * (it runs around every try of one call; the last failure is the call's error, not a retry).
 */
export const retryWatcher = (
  request: ModelRequest,
  maxRetries: number,
  signal: AbortSignal,
  /** The reason of a failed answer's status (AnthropicModel's mapping). */
  reasonOf: (status: number) => ModelErrorReason
): { middleware?: ReadonlyArray<Middleware> } => {
  const onRetry = request.onRetry
  if (onRetry === undefined || maxRetries === 0) return {}
  let tries = 0
  const tell = (retry: ModelRetry) => {
    try {
      onRetry(retry)
    } catch (cause) {
      throw new CallbackFailed("onRetry", cause) // a middleware's own error: the SDK passes it on as it is
    }
  }
  const watch: Middleware = async (apiRequest, next) => {
    const retry = ++tries
    let response: Response
    try {
      response = await next(apiRequest)
    } catch (error) {
      // the SDK retries a connection failure or a timeout, not the caller's abort
      if (retry <= maxRetries && !signal.aborted) tell({ reason: "network", retry, maxRetries })
      throw error
    }
    if (!response.ok && retry <= maxRetries && sdkRetries(response)) {
      const wait = retryAfterMs(response.headers, Date.now())
      tell({
        reason: reasonOf(response.status),
        status: response.status,
        ...(wait === undefined ? {} : { retryInMs: wait }),
        retry,
        maxRetries
      })
    }
    return response
  }
  return { middleware: [watch] }
}
