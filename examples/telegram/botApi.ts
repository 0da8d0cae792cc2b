/**
 * The few Telegram Bot API calls the bot needs (getMe, getUpdates, sendMessage), over the global
 * `fetch`: `POST <base>/bot<token>/<method>` with a JSON body, answered `{ ok, result }` or
 * `{ ok: false, error_code, description, parameters? }`.
 *
 * The token is a `Redacted`: it is read only to build the request URL, and removed from every
 * error text (a connection error may quote the URL).
 */
import { Data, Effect, Redacted } from "effect"
import { parseWebhookUrl } from "../../src/agent/index.js"

/** A Bot API call failed: Telegram's answer (`status`, `description`, `retryAfterMs`), or no answer. */
export class BotApiError extends Data.TaggedError("BotApiError")<{
  readonly method: string
  /** The HTTP status (Telegram's `error_code`); absent for a connection error or a timeout. */
  readonly status?: number | undefined
  /** Telegram's `parameters.retry_after`, in ms (429). */
  readonly retryAfterMs?: number | undefined
  /** Telegram's `parameters.migrate_to_chat_id` (400: the group was upgraded to this supergroup). */
  readonly migrateToChatId?: number | undefined
  readonly message: string
}> {}

/** Where the Bot API is and who the bot is. */
export interface BotApiConfig {
  /** `https://api.telegram.org` unless `TELEGRAM_API_BASE` says otherwise. */
  readonly base: string
  readonly token: Redacted.Redacted<string>
}

/** What the bot reads of a Telegram update (the rest is ignored). */
export interface Update {
  readonly update_id: number
  readonly message?: {
    readonly message_id: number
    readonly chat: { readonly id: number | string; readonly type?: string }
    readonly text?: string
    readonly [kind: string]: unknown
  }
  readonly [kind: string]: unknown
}

/** The kinds of message content the bot names in its answer to a message without text. */
const CONTENT_KINDS = [
  "photo",
  "sticker",
  "voice",
  "video",
  "video_note",
  "audio",
  "document",
  "animation",
  "location",
  "contact",
  "poll"
]

/** What a message without text carries ("photo", "sticker", ...), for a log line and a polite reply. */
export const contentKind = (message: NonNullable<Update["message"]>): string =>
  CONTENT_KINDS.find((kind) => message[kind] !== undefined)?.replace("_", " ") ?? "message without text"

/** The kind of an update that is not a message (`edited_message`, `callback_query`, ...). */
export const updateKind = (update: Update): string =>
  Object.keys(update).find((key) => key !== "update_id") ?? "empty update"

export interface BotApi {
  readonly call: <A>(
    method: string,
    params: Record<string, unknown>,
    timeoutMs: number
  ) => Effect.Effect<A, BotApiError>
}

/** The Bot API client for `config`. */
export const makeBotApi = (config: BotApiConfig): BotApi => {
  const base = config.base.replace(/\/+$/, "")
  const scrub = (text: string) => text.split(Redacted.value(config.token)).join("<token>")
  const call = <A>(method: string, params: Record<string, unknown>, timeoutMs: number): Effect.Effect<A, BotApiError> =>
    Effect.tryPromise({
      try: async (interrupted) => {
        const response = await fetch(`${base}/bot${Redacted.value(config.token)}/${method}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(params),
          signal: AbortSignal.any([interrupted, AbortSignal.timeout(timeoutMs)])
        })
        return { status: response.status, text: await response.text() }
      },
      catch: (cause) => {
        const inner = cause instanceof Error && cause.cause instanceof Error ? cause.cause : cause
        const why = cause instanceof Error && cause.name === "TimeoutError"
          ? `no answer within ${timeoutMs} ms`
          : inner instanceof Error
          ? inner.message
          : String(inner)
        return new BotApiError({ method, message: scrub(`${method} failed: ${why}`) })
      }
    }).pipe(
      Effect.flatMap(({ status, text }) => {
        let body: {
          ok?: unknown
          result?: unknown
          description?: unknown
          error_code?: unknown
          parameters?: { retry_after?: unknown; migrate_to_chat_id?: unknown }
        }
        try {
          body = JSON.parse(text)
        } catch {
          return Effect.fail(
            new BotApiError({
              method,
              status,
              message: scrub(`${method} answered ${status} with no JSON: ${text.slice(0, 200)}`)
            })
          )
        }
        if (body.ok === true && status >= 200 && status < 300) return Effect.succeed(body.result as A)
        const code = typeof body.error_code === "number" ? body.error_code : status
        const retryAfter = body.parameters?.retry_after
        const retryAfterMs = typeof retryAfter === "number" && retryAfter >= 0 ? retryAfter * 1000 : undefined
        const description = typeof body.description === "string" ? body.description : "no description"
        const migrateTo = body.parameters?.migrate_to_chat_id
        return Effect.fail(
          new BotApiError({
            method,
            status: code,
            retryAfterMs,
            migrateToChatId: typeof migrateTo === "number" && Number.isSafeInteger(migrateTo) ? migrateTo : undefined,
            message: scrub(
              `${method} answered ${code}: ${description}${
                retryAfterMs === undefined ? "" : ` (retry after ${retryAfterMs / 1000} s)`
              }`
            )
          })
        )
      })
    )
  return { call }
}

/**
 * Checks `TELEGRAM_BOT_TOKEN` without ever printing it: the token, or a one-line reason.
 * A token from @BotFather is `<bot id>:<secret>`, e.g. `123456789:AA...` (35 characters after the colon).
 */
export const readToken = (value: string | undefined): Redacted.Redacted<string> | string => {
  if (value === undefined || value.trim() === "") {
    return "TELEGRAM_BOT_TOKEN is not set: create a bot with @BotFather on Telegram, then run TELEGRAM_BOT_TOKEN=<token> npm run telegram"
  }
  if (!/^\d{1,20}:[A-Za-z0-9_-]{20,}$/.test(value.trim())) {
    return `Expected TELEGRAM_BOT_TOKEN to look like <digits>:<at least 20 letters, digits, _ or -> (as @BotFather gives it), got ${value.length} characters that do not (not shown)`
  }
  return Redacted.make(value.trim())
}

/** Checks `TELEGRAM_API_BASE`: an http(s) URL, or a one-line reason. */
export const readApiBase = (value: string | undefined): string | { readonly problem: string } => {
  if (value === undefined || value === "") return "https://api.telegram.org"
  const url = parseWebhookUrl(value, "TELEGRAM_API_BASE")
  return typeof url === "string" ? { problem: url } : value
}
