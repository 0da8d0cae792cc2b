/**
 * The bot's channel: each delivery entry is one reply to a chat (`entry.message.to` is the chat
 * id), sent with `sendMessage`, split into parts of at most 4,096 characters sent in order.
 *
 * Failures carry Telegram's status so the delivery queue's `classify` decides: 429 waits
 * `parameters.retry_after`, 403 (the user blocked the bot) and other 4xx are permanent (the entry
 * goes to the dead letters), 5xx and connection errors are retried. A group upgraded to a supergroup
 * answers 400 with `parameters.migrate_to_chat_id`: the part is sent again, at once, to the new chat,
 * and every later reply to the old chat goes to the new one (said once, through `onMigrated`), after
 * a restart too: the mapping is kept with the bot's state (`migrations.ts`, `migrated.json`).
 *
 * A reply of several parts records how many parts went out (in `parts.json`, after each part), so
 * a retry, or the next start, sends only the parts not sent yet. Telegram has no idempotency key and
 * no way to ask whether a message went out: an entry the last process may have sent (`maybeSent`,
 * a crash between the attempt and its outcome) is sent again, and said so (at least once).
 */
import { Effect } from "effect"
import { replyOf } from "../../src/agent/index.js"
import type { Channel } from "../../src/agent/index.js"
import { DeliveryFailure } from "../../src/delivery/index.js"
import type { DeliveryEntry } from "../../src/delivery/index.js"
import type { BotApi, BotApiError } from "./botApi.js"
import type { Migrations } from "./migrations.js"
import { splitMessage } from "./split.js"
import { readState, writeState } from "./stateFile.js"

/** How long one `sendMessage` may take. */
const SEND_TIMEOUT_MS = 15_000

/** The text an entry carries: an agent's reply, or a `{ text }` body (the bot's own notes). */
export const textOf = (entry: DeliveryEntry): string => {
  const reply = replyOf(entry)
  if (reply !== undefined) return reply.text
  const body = entry.message.body as { readonly text?: unknown } | null
  return typeof body?.text === "string" ? body.text : JSON.stringify(entry.message.body)
}

/** The Telegram channel; `partsFile` keeps the progress of replies of several parts. */
export const TelegramChannel = (options: {
  readonly api: BotApi
  readonly partsFile: string
  /** Called before sending an entry the last process may have sent already (`entry.maybeSent`). */
  readonly onMaybeSent?: (entry: DeliveryEntry, partsSent: number) => void
  /** The chats upgraded to supergroups, kept across restarts (migrations.ts); a new one is added here. */
  readonly migrations: Migrations
  /** Called once per chat Telegram says was upgraded to a supergroup (its replies go to `to` from now on). */
  readonly onMigrated?: (from: string, to: string) => void
}): Effect.Effect<Channel, DeliveryFailure> =>
  Effect.gen(function*() {
    const toFailure = (error: { readonly message: string }) =>
      new DeliveryFailure({ message: error.message, permanent: true })
    const sent = new Map(
      Object.entries(yield* Effect.mapError(readState<Record<string, number>>(options.partsFile, {}), toFailure))
    )
    const record = Effect.suspend(() => writeState(options.partsFile, Object.fromEntries(sent))).pipe(
      Effect.mapError((error) => new DeliveryFailure({ message: error.message }))
    )
    const { migrations } = options
    const sendMessage = (chat: string, text: string | undefined): Effect.Effect<unknown, BotApiError> =>
      options.api.call("sendMessage", { chat_id: migrations.get(chat) ?? chat, text }, SEND_TIMEOUT_MS).pipe(
        Effect.catchIf(
          (error) => error.status === 400 && error.migrateToChatId !== undefined && migrations.get(chat) === undefined,
          (error) => {
            const to = String(error.migrateToChatId)
            return migrations.add(chat, to).pipe(
              Effect.andThen(Effect.sync(() => options.onMigrated?.(chat, to))),
              Effect.andThen(options.api.call("sendMessage", { chat_id: to, text }, SEND_TIMEOUT_MS))
            )
          }
        )
      )
    const send = (entry: DeliveryEntry): Effect.Effect<void, DeliveryFailure> =>
      Effect.gen(function*() {
        const chat = entry.message.to
        const parts = splitMessage(textOf(entry))
        if (entry.maybeSent === true) options.onMaybeSent?.(entry, sent.get(entry.id) ?? 0)
        for (let i = sent.get(entry.id) ?? 0; i < parts.length; i++) {
          yield* sendMessage(chat, parts[i]).pipe(
            Effect.mapError((error) =>
              new DeliveryFailure({
                message: parts.length === 1 ? error.message : `part ${i + 1} of ${parts.length}: ${error.message}`,
                status: error.status,
                retryAfterMs: error.retryAfterMs
              })
            )
          )
          if (parts.length > 1 && i < parts.length - 1) {
            sent.set(entry.id, i + 1)
            yield* record
          }
        }
        if (sent.delete(entry.id)) yield* record
      })
    return { name: "telegram", send } satisfies Channel
  })
