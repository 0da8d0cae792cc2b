/** Splitting a reply into Telegram messages. */

/** Telegram's limit on the text of one message (in UTF-16 code units, as Telegram counts them). */
export const MAX_MESSAGE_LENGTH = 4096

/**
 * Splits `text` into parts of at most `max` UTF-16 code units, in order, never inside a surrogate
 * pair (an emoji stays whole); the parts joined give `text` back. An empty text is no parts.
 */
export const splitMessage = (text: string, max = MAX_MESSAGE_LENGTH): Array<string> => {
  const parts: Array<string> = []
  let at = 0
  while (at < text.length) {
    let end = Math.min(at + max, text.length)
    // Do not cut between a high and a low surrogate.
    if (end < text.length && isHighSurrogate(text.charCodeAt(end - 1)) && end - 1 > at) end--
    parts.push(text.slice(at, end))
    at = end
  }
  return parts
}

const isHighSurrogate = (code: number): boolean => code >= 0xd800 && code <= 0xdbff
