/**
 * A fake Telegram Bot API server for the bot's end-to-end tests: `POST /bot<token>/<method>` for
 * getMe, getUpdates (a real long poll: held until an update arrives or `timeout` passes; an offset
 * confirms the updates below it, as Telegram does) and sendMessage (recorded; a test can make the
 * next calls answer 429 with `retry_after`, make a chat answer 403 "blocked" or 400 "upgraded to a
 * supergroup" (with `migrate_to_chat_id`), or hold a call
 * unanswered). Waits are latches on what arrived, never sleeps.
 */
import type * as http from "node:http"
import { answer, startServer } from "./httpServer.js"
import type { TestServer } from "./httpServer.js"

/** A syntactically valid token (never a real one). */
export const FAKE_TOKEN = "123456789:AAFakeTokenForTestsOnly_abcdefghijk"

export interface SentMessage {
  readonly chat: string
  readonly text: string
  /** Date.now() when it arrived. */
  readonly at: number
}

export interface FakeTelegram {
  readonly url: string
  /** sendMessage calls answered 200, in order. */
  readonly sent: Array<SentMessage>
  /** Every sendMessage call and how it was answered. */
  readonly attempts: Array<SentMessage & { readonly answered: number | "held" }>
  /** Every getUpdates call's offset (undefined when none was given). */
  readonly polls: Array<number | undefined>
  /** Every `sendChatAction` call, in order (answered `true`). */
  readonly actions: Array<{ readonly chat: string; readonly action: string; readonly at: number }>
  readonly pushText: (chat: number, text: string) => number
  readonly pushUpdate: (update: Record<string, unknown>) => number
  /** The next `count` sendMessage calls answer 429 with `retry_after` seconds. */
  readonly storm: (count: number, retryAfter: number) => void
  /** sendMessage to `chat` answers 403 "bot was blocked by the user". */
  readonly block: (chat: number) => void
  /** `chat` was upgraded to the supergroup `to`: sendMessage to it answers 400 with `migrate_to_chat_id`. */
  readonly migrate: (chat: number, to: number) => void
  /** The next `count` getUpdates calls answer `status` (e.g. 502, or 409 "terminated by other getUpdates request"). */
  readonly failPolls: (count: number, status: number) => void
  /** From now on the token is refused (401), as after /revoke in @BotFather. */
  readonly revoke: () => void
  /** The next sendMessage call (after `skip` more) is read and never answered (resolves when it arrived). */
  readonly holdNext: (skip?: number) => Promise<SentMessage>
  /** Resolves once `sent` satisfies `check`. */
  readonly until: <A>(
    check: (sent: Array<SentMessage>) => A | undefined,
    what: string,
    timeoutMs?: number
  ) => Promise<A>
  /** Resolves once every update pushed so far was confirmed (a getUpdates with a higher offset). */
  readonly confirmed: (timeoutMs?: number) => Promise<void>
  readonly close: () => Promise<void>
}

export const startFakeTelegram = async (token = FAKE_TOKEN): Promise<FakeTelegram> => {
  let nextId = 1000
  let queue: Array<Record<string, unknown> & { readonly update_id: number }> = []
  let confirmedBelow = 0
  let stormLeft = 0
  let stormRetryAfter = 1
  let pollFailures = 0
  let pollFailStatus = 502
  let revoked = false
  const blocked = new Set<string>()
  const migrated = new Map<string, number>()
  let hold: ((m: SentMessage) => void) | undefined
  let holdSkip = 0
  const sent: Array<SentMessage> = []
  const actions: Array<{ readonly chat: string; readonly action: string; readonly at: number }> = []
  const attempts: FakeTelegram["attempts"] = []
  const polls: Array<number | undefined> = []
  const pollers = new Set<() => void>()
  const watchers = new Set<() => void>()
  const changed = () => {
    for (const w of [...watchers]) w()
  }

  const ok = (res: http.ServerResponse, result: unknown) => answer(res, 200, { ok: true, result })
  const fail = (res: http.ServerResponse, code: number, description: string, parameters?: unknown) =>
    answer(res, code, { ok: false, error_code: code, description, ...(parameters === undefined ? {} : { parameters }) })

  const server: TestServer = await startServer((req, res, raw) => {
    const match = /^\/bot([^/]+)\/(\w+)$/.exec(req.path)
    if (match === null) return fail(res, 404, "Not Found")
    if (match[1] !== token || revoked) return fail(res, 401, "Unauthorized")
    const params = req.body === "" ? {} : (JSON.parse(req.body) as Record<string, any>)
    switch (match[2]) {
      case "getMe":
        return ok(res, { id: 123456789, is_bot: true, first_name: "Fake", username: "fake_switchyard_bot" })
      case "getUpdates": {
        const offset = typeof params.offset === "number" ? params.offset : undefined
        polls.push(offset)
        if (pollFailures > 0) {
          pollFailures--
          return pollFailStatus === 409
            ? fail(
              res,
              409,
              "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
            )
            : fail(res, pollFailStatus, "Bad Gateway")
        }
        if (offset !== undefined) {
          confirmedBelow = Math.max(confirmedBelow, offset)
          queue = queue.filter((u) => u.update_id >= offset)
          changed()
        }
        let timer: NodeJS.Timeout | undefined
        const reply = () => {
          pollers.delete(reply)
          clearTimeout(timer)
          if (!res.writableEnded && !res.destroyed) {
            ok(
              res,
              queue.filter((u) => offset === undefined || u.update_id >= offset)
            )
          }
        }
        if (queue.length > 0) return reply()
        timer = setTimeout(reply, (typeof params.timeout === "number" ? params.timeout : 0) * 1000)
        pollers.add(reply)
        raw.socket.on("close", () => {
          pollers.delete(reply)
          clearTimeout(timer)
        })
        return
      }
      case "sendMessage": {
        const message: SentMessage = { chat: String(params.chat_id), text: String(params.text), at: Date.now() }
        if (hold !== undefined && holdSkip > 0) holdSkip--
        else if (hold !== undefined) {
          const h = hold
          hold = undefined
          attempts.push({ ...message, answered: "held" })
          h(message)
          return // never answered
        }
        const status = blocked.has(message.chat)
          ? 403
          : migrated.has(message.chat)
          ? 400
          : stormLeft > 0
          ? 429
          : 200
        attempts.push({ ...message, answered: status })
        if (status === 403) return fail(res, 403, "Forbidden: bot was blocked by the user")
        if (status === 400) {
          return fail(res, 400, "Bad Request: group chat was upgraded to a supergroup chat", {
            migrate_to_chat_id: migrated.get(message.chat)
          })
        }
        if (status === 429) {
          stormLeft--
          return fail(res, 429, `Too Many Requests: retry after ${stormRetryAfter}`, { retry_after: stormRetryAfter })
        }
        sent.push(message)
        changed()
        return ok(res, { message_id: sent.length, chat: { id: Number(message.chat) }, text: message.text })
      }
      case "sendChatAction":
        actions.push({ chat: String(params.chat_id), action: String(params.action), at: Date.now() })
        return ok(res, true)
      default:
        return fail(res, 404, "Not Found: method not found")
    }
  })

  const push = (update: Record<string, unknown>) => {
    const id = nextId++
    queue.push({ ...update, update_id: id })
    for (const p of [...pollers]) p()
    return id
  }
  const wait = <A>(check: () => A | undefined, what: string, timeoutMs: number) =>
    new Promise<A>((resolve, reject) => {
      const attempt = () => {
        const value = check()
        if (value === undefined) return
        watchers.delete(attempt)
        clearTimeout(timer)
        resolve(value)
      }
      const timer = setTimeout(() => {
        watchers.delete(attempt)
        reject(
          new Error(
            `fake Telegram: timed out waiting for ${what}; sent: ${
              JSON.stringify(sent.map((m) => [m.chat, m.text.slice(0, 40)]))
            }`
          )
        )
      }, timeoutMs)
      watchers.add(attempt)
      attempt()
    })

  return {
    url: server.url,
    sent,
    actions,
    attempts,
    polls,
    pushUpdate: push,
    pushText: (chat, text) =>
      push({ message: { message_id: nextId, date: 0, chat: { id: chat, type: "private" }, text } }),
    storm: (count, retryAfter) => {
      stormLeft = count
      stormRetryAfter = retryAfter
    },
    block: (chat) => void blocked.add(String(chat)),
    migrate: (chat, to) => void migrated.set(String(chat), to),
    failPolls: (count, status) => {
      pollFailures = count
      pollFailStatus = status
    },
    revoke: () => {
      revoked = true
      for (const p of [...pollers]) p()
    },
    holdNext: (skip = 0) =>
      new Promise<SentMessage>((resolve) => {
        holdSkip = skip
        hold = resolve
      }),
    until: (check, what, timeoutMs = 20_000) => wait(() => check(sent), what, timeoutMs),
    confirmed: (timeoutMs = 20_000) =>
      wait(() => (confirmedBelow >= nextId ? true : undefined), "every update confirmed", timeoutMs).then(() =>
        undefined
      ),
    close: () => {
      for (const p of [...pollers]) p()
      return server.close()
    }
  }
}
