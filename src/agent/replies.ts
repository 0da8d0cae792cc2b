/**
 * Replies as delivery-log entries: the body of a turn's reply, split into several entries when it
 * would not fit in one record of the log (`maxRecordBytes`), and the size check of user messages.
 *
 * A reply is split on code point boundaries (never inside a surrogate pair), so that each part's
 * record, JSON-escaped text included, stays within the limit. Part 1 keeps the idempotency key
 * `reply:<session>#<turn>`; part i > 1 is `reply:<session>#<turn>/<i>`, so logging the parts again
 * after a crash returns the entries the log already holds.
 */
import { Data } from "effect"
import type { ReplyBody } from "./Channel.js"
import type { TurnRecord } from "./Transcripts.js"

/** The delivery log's default record limit (`DeliveryLog.open`'s `maxRecordBytes`). */
export const DEFAULT_MAX_RECORD_BYTES = 1024 * 1024

/** A user message larger than the delivery log accepts: refused at `send`, never accepted. */
export class MessageTooLarge extends Data.TaggedError("MessageTooLarge")<{
  readonly session: string
  /** The message's size in UTF-8 bytes. */
  readonly bytes: number
  /** `maxRecordBytes`. */
  readonly limit: number
  readonly message: string
}> {}

/** Fails a text over `limit` UTF-8 bytes (`undefined` when it fits). */
export const checkMessageSize = (session: string, text: string, limit: number): MessageTooLarge | undefined => {
  // A UTF-16 unit is at most 3 UTF-8 bytes: most texts need no count at all.
  if (text.length * 3 <= limit) return undefined
  const bytes = Buffer.byteLength(text, "utf8")
  if (bytes <= limit) return undefined
  return new MessageTooLarge({
    session,
    bytes,
    limit,
    message: `Expected a message of at most ${limit} bytes (the delivery log's \`maxRecordBytes\`), got ${bytes} bytes`
  })
}

/**
 * Room a record needs besides the JSON of its message: the frame header (17 bytes), the entry head
 * (id, seq, time, key length: 57 bytes), the key once more, and slack for the log's own fields.
 */
const RECORD_OVERHEAD = 17 + 57 + 128

/** What one code point costs inside a JSON string, in UTF-8 bytes. */
const escapedBytes = (cp: number): number => {
  if (cp === 0x22 || cp === 0x5c) return 2
  if (cp < 0x20) return cp === 0x08 || cp === 0x09 || cp === 0x0a || cp === 0x0c || cp === 0x0d ? 2 : 6
  if (cp < 0x80) return 1
  if (cp < 0x800) return 2
  if (cp >= 0xd800 && cp <= 0xdfff) return 6 // a lone surrogate: JSON.stringify escapes it
  if (cp < 0x10000) return 3
  return 4
}

/**
 * Splits `text` into parts of at most `budget` JSON-escaped UTF-8 bytes each, on code point
 * boundaries. Always at least one part (an empty text is one empty part).
 */
export const splitText = (text: string, budget: number): Array<string> => {
  const parts: Array<string> = []
  let start = 0
  let used = 0
  for (let i = 0; i < text.length;) {
    const cp = text.codePointAt(i)!
    const units = cp > 0xffff ? 2 : 1
    const cost = escapedBytes(cp)
    if (used + cost > budget && i > start) {
      parts.push(text.slice(start, i))
      start = i
      used = 0
    }
    used += cost
    i += units
  }
  parts.push(text.slice(start))
  return parts
}

/** The reply body of a turn record (one part). */
export const replyBody = (session: string, record: TurnRecord, text = record.reply): ReplyBody => ({
  session,
  kind: record.kind,
  text,
  messages: record.kind === "user" ? record.user.length : 1,
  ...(record.job === undefined ? {} : { job: record.job }),
  turn: record.n
})

/** The idempotency key of part `part` (from 1) of a turn's reply. */
export const replyKey = (session: string, n: number, part: number): string =>
  part === 1 ? `reply:${session}#${n}` : `reply:${session}#${n}/${part}`

/** The outbound messages of a turn's reply: one, or several parts (`part`, `parts` in the body) in order. */
export const replyMessages = (
  channel: string,
  session: string,
  record: TurnRecord,
  maxRecordBytes: number
): Array<
  { readonly channel: string; readonly to: string; readonly body: ReplyBody; readonly idempotencyKey: string }
> => {
  const make = (text: string, part: number, parts: number) => ({
    channel,
    to: record.to,
    body: parts === 1 ? replyBody(session, record, text) : { ...replyBody(session, record, text), part, parts },
    idempotencyKey: replyKey(session, record.n, part)
  })
  const whole = make(record.reply, 1, 1)
  if (
    Buffer.byteLength(JSON.stringify(whole), "utf8") + RECORD_OVERHEAD + whole.idempotencyKey.length * 3 <=
      maxRecordBytes
  ) {
    return [whole]
  }
  // The room of the text: the record without it, with the largest part numbers it can carry.
  const empty = make("", 1_000_000, 1_000_000)
  const budget = maxRecordBytes - RECORD_OVERHEAD - Buffer.byteLength(JSON.stringify(empty), "utf8") -
    Buffer.byteLength(empty.idempotencyKey, "utf8") - 16
  const texts = splitText(record.reply, Math.max(1, budget))
  return texts.map((text, i) => make(text, i + 1, texts.length))
}
