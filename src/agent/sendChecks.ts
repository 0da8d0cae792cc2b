/**
 * What `send` refuses before it accepts anything: a session that is not a well-formed non-empty
 * string, or that belongs to the heartbeat or a cron job; texts that are not a non-empty list of
 * strings, or larger than a record of the delivery log.
 */
import { RequestError } from "../queue/index.js"
import { HEARTBEAT_SESSION } from "./Heartbeat.js"
import { checkMessageSize } from "./replies.js"
import type { MessageTooLarge } from "./replies.js"
import { isWellFormed } from "./turnErrors.js"

/** Whether a session id belongs to the heartbeat or a cron job (users cannot send to it). */
export const isReservedSession = (session: string): boolean =>
  session === HEARTBEAT_SESSION || session.startsWith("cron:")

/** Why `send(session, texts)` is refused at once, or `undefined` (the checks in the order `send` makes them). */
export const checkSend = (
  session: string,
  texts: ReadonlyArray<string>,
  maxRecordBytes: number
): RequestError | MessageTooLarge | undefined => {
  if (typeof session !== "string" || session === "") {
    return new RequestError({
      lane: "main",
      key: String(session),
      message: `Expected \`session\` to be a non-empty string, got \`${String(session)}\``
    })
  }
  if (isReservedSession(session)) {
    return new RequestError({
      lane: "main",
      key: session,
      message:
        `Expected \`session\` not to be \`${HEARTBEAT_SESSION}\` or start with \`cron:\` (the heartbeat's and cron jobs' own sessions), got \`${session}\``
    })
  }
  if (!isWellFormed(session)) {
    return new RequestError({
      lane: "main",
      key: session,
      message: `Expected \`session\` to be well-formed UTF-16 (no lone surrogate), got \`${JSON.stringify(session)}\``
    })
  }
  if (!Array.isArray(texts as unknown) || texts.length === 0 || texts.some((t) => typeof t !== "string")) {
    return new RequestError({
      lane: "main",
      key: session,
      message: `Expected the message texts to be a non-empty list of strings, got \`${String(texts)}\``
    })
  }
  for (const text of texts) {
    const big = checkMessageSize(session, text, maxRecordBytes)
    if (big !== undefined) return big
  }
  return undefined
}
