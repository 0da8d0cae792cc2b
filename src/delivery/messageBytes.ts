/**
 * The append path's message check and encoder in one walk: the message is checked, copied (the
 * entry `append` returns carries the copy) and written as the UTF-8 bytes of its JSON text, with
 * no JSON string in between, into a scratch buffer the caller copies into the record. The bytes are
 * exactly `Buffer.from(JSON.stringify(message))` with the fields in the log's order
 * (`{"channel":…,"to":…,"body":…[,"idempotencyKey":…]}`): the same escapes (`\"`, `\\`, `\b`, `\f`,
 * `\n`, `\r`, `\t`, `\u00xx` below U+0020, `\udxxx` for a lone surrogate), numbers as `String(n)`,
 * keys in `for…in` order (own enumerable keys, integers first: the order `JSON.stringify` takes).
 *
 * Anything off the plain path (a value that is not JSON, a `toJSON`, a cycle, nesting past
 * `MAX_BODY_DEPTH`, a string field that is empty or not well-formed, a text past the record limit,
 * an exception from a getter, a call made from inside a getter while encoding) returns `undefined`:
 * the caller then takes `checkMessage`, which says what is wrong or encodes it through `JSON.stringify`.
 */
import type { OutboundMessage } from "./types.js"
import { loneSurrogateAt, MAX_BODY_DEPTH, plainProto } from "./validate.js"

/** Thrown inside the walk (made once: no stack trace per throw): this message takes the general path. */
const SLOW = new Error("not on the plain path")

/** Strings longer than this are escaped by `JSON.stringify` (native, faster per character) and written as UTF-8. */
const LONG = 256
/** From this length a string is first tested for anything to escape (a native regex), then copied natively. */
const SCAN = 16
/** A character JSON escapes (a quote, a backslash, below U+0020), or one that is not ASCII. */
const NOT_PLAIN = new RegExp("[\"\\\\" + String.fromCharCode(0) + "-" + String.fromCharCode(0x1f) + "\\u0080-\\uffff]")

const ascii = (s: string): Uint8Array => Uint8Array.from(s, (c) => c.charCodeAt(0))
const CHANNEL = ascii("{\"channel\":")
const TO = ascii(",\"to\":")
const BODY = ascii(",\"body\":")
const KEY = ascii(",\"idempotencyKey\":")
const TRUE = ascii("true")
const FALSE = ascii("false")
const NULL = ascii("null")
const HEX = ascii("0123456789abcdef")

const hasOwn = (o: object, k: string): boolean => Object.prototype.hasOwnProperty.call(o, k)

/** `String.prototype.isWellFormed` (ES2024, in every supported Node; the lib target predates it). */
const wellFormed: (s: string) => boolean = "isWellFormed" in String.prototype
  ? (s) => (s as unknown as { isWellFormed: () => boolean }).isWellFormed()
  : (s) => loneSurrogateAt(s) < 0

/** A non-empty, well-formed string (what `checkMessage` accepts for `channel`, `to` and a key). */
const goodField = (v: unknown): v is string => typeof v === "string" && v.length > 0 && wellFormed(v)

/** Buffer methods Node has on every supported version (the documented wrappers add argument checks per call). */
export interface RawBuffer {
  latin1Slice(start: number, end: number): string
  utf8Slice(start: number, end: number): string
  utf8Write(s: string, offset: number, length: number): number
  latin1Write(s: string, offset: number, length: number): number
}

/** The text of `buf[start, end)`: `ascii` says every byte is below 0x80 (a one-byte copy then suffices). */
export const textOf = (buf: Buffer, start: number, end: number, isAscii: boolean): string =>
  isAscii
    ? (buf as unknown as RawBuffer).latin1Slice(start, end)
    : (buf as unknown as RawBuffer).utf8Slice(start, end)

/**
 * Checks and encodes messages into a buffer the caller gives (where the text is to stay) or its own
 * scratch buffer; one per log (calls do not overlap).
 */
export class MessageBytes {
  /** Its own buffer, for texts with nowhere else to go (or past the end of the caller's). */
  private scratch: Buffer = Buffer.allocUnsafeSlow(16 * 1024)
  /** The encoded text is `buf[start, start + bytes)` after a successful `encode`. */
  buf: Buffer = this.scratch
  start = 0
  bytes = 0
  /** Every byte of the text is below 0x80. */
  ascii = true
  private pos = 0
  private limit = 0
  private busy = false
  /** The objects being walked, outermost first (to see a cycle); cleared on the way out. */
  private readonly stack: Array<object | undefined> = []

  /**
   * Check and encode `m`, refusing texts over `limit` bytes, into `into[at…]` (its bytes from `at` on
   * are free to write) or, past its end or without it, the scratch buffer: see `buf` and `start`.
   * Returns the copy of the message (as `JSON.parse` of the text gives it back), or `undefined`:
   * take `checkMessage` instead.
   */
  encode(m: OutboundMessage, limit: number, into?: Buffer, at = 0): OutboundMessage | undefined {
    if (this.busy || m === null || typeof m !== "object") return undefined
    const channel = m.channel
    const to = m.to
    const key = m.idempotencyKey
    if (!goodField(channel) || !goodField(to) || (key !== undefined && !goodField(key))) return undefined
    this.busy = true
    this.buf = into ?? this.scratch
    this.pos = this.start = into === undefined ? 0 : at
    this.ascii = true
    this.limit = limit
    try {
      this.lit(CHANNEL)
      this.str(channel)
      this.lit(TO)
      this.str(to)
      this.lit(BODY)
      const body = this.value(m.body, 0)
      if (key !== undefined) {
        this.lit(KEY)
        this.str(key)
      }
      this.room(1)
      this.buf[this.pos++] = 0x7d
      if (this.pos - this.start > limit) return undefined
      this.bytes = this.pos - this.start
      return key === undefined ? { channel, to, body } : { channel, to, body, idempotencyKey: key }
    } catch {
      // SLOW, or a getter's exception: `checkMessage` meets it again and reports it.
      this.stack.length = 0
      return undefined
    } finally {
      this.busy = false
      if (this.scratch.length > 4 * 1024 * 1024) this.scratch = Buffer.allocUnsafeSlow(16 * 1024)
    }
  }

  /** Make room for `n` more bytes at `pos`. */
  private room(n: number): void {
    if (this.pos + n <= this.buf.length) return
    const used = this.pos - this.start
    if (used > this.limit) throw SLOW
    // The text so far moves to the start of the scratch buffer (grown if it is too small or in use).
    let target = this.scratch
    if (this.buf === target || used + n > target.length) {
      let size = target.length * 2
      while (size < used + n) size *= 2
      target = this.scratch = Buffer.allocUnsafeSlow(size)
    }
    this.buf.copy(target, 0, this.start, this.pos)
    this.buf = target
    this.start = 0
    this.pos = used
  }

  private lit(bytes: Uint8Array): void {
    this.room(bytes.length)
    const b = this.buf
    let p = this.pos
    for (let i = 0; i < bytes.length; i++) b[p++] = bytes[i]!
    this.pos = p
  }

  private value(v: unknown, depth: number): unknown {
    switch (typeof v) {
      case "string":
        this.str(v)
        return v
      case "number":
        if (!Number.isFinite(v)) throw SLOW
        this.num(v)
        return v + 0
      case "boolean":
        this.lit(v ? TRUE : FALSE)
        return v
      case "object":
        if (v === null) {
          this.lit(NULL)
          return null
        }
        return this.object(v, depth)
      default:
        throw SLOW
    }
  }

  /** An array or plain object with `depth` objects around it. */
  private object(v: object, depth: number): unknown {
    if (depth >= MAX_BODY_DEPTH || typeof (v as { toJSON?: unknown }).toJSON === "function") throw SLOW
    const stack = this.stack
    for (let i = 0; i < depth; i++) if (stack[i] === v) throw SLOW
    if (this.pos - this.start > this.limit) throw SLOW
    stack[depth] = v
    let out: unknown
    if (Array.isArray(v)) {
      this.room(1)
      this.buf[this.pos++] = 0x5b
      const copy: Array<unknown> = []
      for (let i = 0; i < v.length; i++) {
        if (i > 0) {
          this.room(1)
          this.buf[this.pos++] = 0x2c
        }
        copy.push(this.value(v[i], depth + 1))
      }
      this.room(1)
      this.buf[this.pos++] = 0x5d
      out = copy
    } else {
      if (!plainProto(v)) throw SLOW
      this.room(1)
      this.buf[this.pos++] = 0x7b
      const copy: Record<string, unknown> = {}
      let first = true
      for (const k in v) {
        if (!hasOwn(v, k)) continue
        this.room(1)
        if (first) first = false
        else this.buf[this.pos++] = 0x2c
        this.str(k)
        this.room(1)
        this.buf[this.pos++] = 0x3a
        const item = this.value((v as Record<string, unknown>)[k], depth + 1)
        // An own "__proto__" is data in JSON (JSON.parse makes it an own property), not the prototype.
        if (k === "__proto__") {
          Object.defineProperty(copy, k, { value: item, enumerable: true, writable: true, configurable: true })
        } else copy[k] = item
      }
      this.room(1)
      this.buf[this.pos++] = 0x7d
      out = copy
    }
    stack[depth] = undefined
    return out
  }

  /** A finite number as JSON writes it (`String(n)`; -0 is "0"). */
  private num(v: number): void {
    this.room(32)
    const b = this.buf
    let p = this.pos
    if (v >= 0 && v < 0x8000_0000 && (v | 0) === v) {
      if (v < 10) b[p++] = 48 + v
      else {
        let digits = 1
        for (let x = v; x >= 10; x = (x / 10) | 0) digits++
        p += digits
        for (let i = p - 1, x = v; i >= p - digits; i--, x = (x / 10) | 0) b[i] = 48 + (x % 10)
      }
    } else {
      const s = String(v)
      for (let i = 0; i < s.length; i++) b[p++] = s.charCodeAt(i)
    }
    this.pos = p
  }

  /** A string as `JSON.stringify` writes it, in UTF-8. */
  private str(s: string): void {
    const n = s.length
    if (n > LONG) return this.longStr(s)
    this.room(n * 6 + 2)
    const b = this.buf
    let p = this.pos
    b[p++] = 0x22
    if (n >= SCAN && !NOT_PLAIN.test(s)) {
      // Printable ASCII with nothing to escape: its bytes are its characters.
      p += (b as unknown as RawBuffer).latin1Write(s, p, n)
      b[p++] = 0x22
      this.pos = p
      return
    }
    for (let i = 0; i < n; i++) {
      const c = s.charCodeAt(i)
      if (c < 0x80) {
        if (c >= 0x20 && c !== 0x22 && c !== 0x5c) {
          b[p++] = c
          continue
        }
        b[p++] = 0x5c
        if (c === 0x22 || c === 0x5c) b[p++] = c
        else if (c === 8) b[p++] = 0x62
        else if (c === 9) b[p++] = 0x74
        else if (c === 10) b[p++] = 0x6e
        else if (c === 12) b[p++] = 0x66
        else if (c === 13) b[p++] = 0x72
        else p = hex4(b, p, c)
        continue
      }
      if (c < 0x800) {
        this.ascii = false
        b[p++] = 0xc0 | (c >> 6)
        b[p++] = 0x80 | (c & 0x3f)
      } else if (c < 0xd800 || c > 0xdfff) {
        this.ascii = false
        b[p++] = 0xe0 | (c >> 12)
        b[p++] = 0x80 | ((c >> 6) & 0x3f)
        b[p++] = 0x80 | (c & 0x3f)
      } else {
        const d = c <= 0xdbff && i + 1 < n ? s.charCodeAt(i + 1) : 0
        if (d >= 0xdc00 && d <= 0xdfff) {
          this.ascii = false
          const cp = ((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000
          b[p++] = 0xf0 | (cp >> 18)
          b[p++] = 0x80 | ((cp >> 12) & 0x3f)
          b[p++] = 0x80 | ((cp >> 6) & 0x3f)
          b[p++] = 0x80 | (cp & 0x3f)
          i++
        } else {
          // A lone surrogate: JSON.stringify escapes it (well-formed JSON.stringify).
          b[p++] = 0x5c
          p = hex4(b, p, c)
        }
      }
    }
    b[p++] = 0x22
    this.pos = p
  }

  private longStr(s: string): void {
    const json = JSON.stringify(s)
    // Well-formed output (no lone surrogates): at most 3 UTF-8 bytes per UTF-16 unit.
    this.room(json.length * 3)
    const n = (this.buf as unknown as RawBuffer).utf8Write(json, this.pos, json.length * 3)
    if (n !== json.length) this.ascii = false
    this.pos += n
  }
}

/** `u` and four lowercase hex digits of `c` at `b[p]`; returns the end. */
const hex4 = (b: Buffer, p: number, c: number): number => {
  b[p++] = 0x75
  b[p++] = HEX[(c >> 12) & 15]!
  b[p++] = HEX[(c >> 8) & 15]!
  b[p++] = HEX[(c >> 4) & 15]!
  b[p++] = HEX[c & 15]!
  return p
}
