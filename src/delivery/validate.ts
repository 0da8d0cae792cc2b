/** Checks of `DeliveryLog.open` options and of what callers hand the log; messages say what to change. */
import { DeliveryLogError } from "./errors.js"
import type { OutboundMessage } from "./types.js"

/** `DeliveryLog.open` options. */
export interface OpenOptions {
  /** Directory of the log; created (mode 0700) if missing. */
  readonly dir: string
  /**
   * `"always"` (default): every mutating call returns only after its record is on disk (fdatasync,
   * shared by overlapping calls). `"never"`: no sync at all — a process crash loses nothing, a power
   * cut may lose anything. For tests only.
   */
  readonly fsync?: "always" | "never"
  /** A segment is rolled once it would pass this size. Default 16 MiB. */
  readonly segmentBytes?: number
  /** Largest record (header + encoded message) accepted. Default 1 MiB. */
  readonly maxRecordBytes?: number
  /** How long an acked entry's idempotency key (and its id, for `ack`) is remembered. Default 24 h. */
  readonly dedupeWindowMs?: number
  /**
   * Which thread makes a batch's write (and, with `fsync: "always"`, its sync; one system call with
   * `O_DSYNC`). `"inline"`: the event loop's own, at the end of the tick that batched it, as
   * better-sqlite3 commits a transaction: no thread hop, the least CPU, and the loop waits for the disk
   * (~0.1–1 ms on an SSD, longer when the disk stalls). `"thread-pool"`: libuv's thread pool: the loop
   * never waits, each write costs a hop to another thread and back, and the calls made meanwhile gather
   * into the next batch. `"auto"` (default): a batch of at least 32 calls (many producers in one tick)
   * is written inline once two such batches in a row were written on the thread pool with no call
   * arriving while they were on their way (nothing else would have run meanwhile), for the next 32 such
   * batches, then the thread pool looks again; smaller batches, and big ones whose writes overlap other
   * work, stay on the thread pool. An inline write that takes longer than 50 ms (the disk stalls) sends
   * every write to the thread pool for the next 30 s.
   */
  readonly writes?: WriteMode
}

/** Where the log's writer writes: see `OpenOptions.writes`. */
export type WriteMode = "auto" | "inline" | "thread-pool"

/** `OpenOptions` with defaults filled in. */
export interface ResolvedOptions {
  readonly dir: string
  readonly sync: boolean
  readonly segmentBytes: number
  readonly maxRecordBytes: number
  readonly dedupeWindowMs: number
  readonly writes: WriteMode
}

const show = (v: unknown): string => {
  if (typeof v === "string") return JSON.stringify(v)
  if (typeof v === "bigint") return `${v}n`
  if (typeof v === "function") return "a function"
  try {
    return String(v)
  } catch {
    return typeof v
  }
}

const invalid = (message: string): DeliveryLogError => new DeliveryLogError({ reason: "invalid", message })

const positiveInteger = (name: string, v: unknown): DeliveryLogError | undefined =>
  typeof v === "number" && Number.isSafeInteger(v) && v >= 1
    ? undefined
    : invalid(`Expected \`${name}\` to be an integer from 1 and up, got \`${show(v)}\``)

/** Record lengths are 32-bit; a bigger limit could not be framed (and a record that big is a mistake). */
const MAX_RECORD_LIMIT = 1024 * 1024 * 1024

/** Fill in defaults, or say which option is wrong. */
export const resolveOptions = (o: OpenOptions): ResolvedOptions | DeliveryLogError => {
  if (o === null || typeof o !== "object") return invalid(`Expected the options to be an object, got \`${show(o)}\``)
  if (typeof o.dir !== "string" || o.dir.length === 0) {
    return invalid(`Expected \`dir\` to be a non-empty string, got \`${show(o.dir)}\``)
  }
  const fsync = o.fsync ?? "always"
  if (fsync !== "always" && fsync !== "never") {
    return invalid(`Expected \`fsync\` to be "always" or "never", got \`${show(fsync)}\``)
  }
  const writes = o.writes ?? "auto"
  if (writes !== "auto" && writes !== "inline" && writes !== "thread-pool") {
    return invalid(`Expected \`writes\` to be "auto", "inline" or "thread-pool", got \`${show(writes)}\``)
  }
  const segmentBytes = o.segmentBytes ?? 16 * 1024 * 1024
  const maxRecordBytes = o.maxRecordBytes ?? 1024 * 1024
  const dedupeWindowMs = o.dedupeWindowMs ?? 24 * 60 * 60 * 1000
  const bad = positiveInteger("segmentBytes", segmentBytes) ??
    positiveInteger("maxRecordBytes", maxRecordBytes) ??
    (maxRecordBytes > MAX_RECORD_LIMIT
      ? invalid(`Expected \`maxRecordBytes\` to be an integer from 1 to ${MAX_RECORD_LIMIT}, got \`${maxRecordBytes}\``)
      : undefined) ??
    (typeof dedupeWindowMs === "number" && Number.isFinite(dedupeWindowMs) && dedupeWindowMs > 0
      ? undefined
      : invalid(`Expected \`dedupeWindowMs\` to be a number above 0, got \`${show(dedupeWindowMs)}\``))
  if (bad) return bad
  return { dir: o.dir, sync: fsync === "always", segmentBytes, maxRecordBytes, dedupeWindowMs, writes }
}

class NotJson extends Error {}

/**
 * Deepest nesting of arrays and objects a `body` may have. The check, the encoder and replay walk
 * bodies recursively; without a limit a deep body overflows the stack ("Maximum call stack size
 * exceeded") instead of being refused.
 */
export const MAX_BODY_DEPTH = 512

/** An array, or an object whose prototype is `Object.prototype` or `null`: what JSON carries as it is. */
export const plainProto = (v: object): boolean => {
  const p: unknown = Object.getPrototypeOf(v)
  return p === Object.prototype || p === null || Array.isArray(v)
}

/** Set by `copyJson` when it met a value with `toJSON`: the copy must then come from the JSON text. */
let metToJson = false

/** A copy of a JSON-safe property value, as JSON.parse(JSON.stringify(v)) gives it (-0 becomes 0). */
const copyItem = (item: unknown, where: () => string, path: Array<object>): unknown =>
  typeof item === "string"
    ? item
    : typeof item === "number" && Number.isFinite(item)
    ? item + 0
    : copyJson(item, where, path)

/**
 * Checks `value` and returns a copy of it, as JSON.parse(JSON.stringify(value)) would (about 10x
 * cheaper than that round trip). Throws `NotJson` naming the first value JSON cannot carry
 * (JSON.stringify would drop or mangle it). Values with `toJSON` (Date) are left to JSON.stringify
 * (and set `metToJson`: the caller then parses the copy from the JSON text). `path` holds the objects
 * being walked (a stack: bodies are shallow), to report a cycle. `where` is a function so that the
 * path text is built only for an error.
 */
const copyJson = (value: unknown, where: () => string, path: Array<object>): unknown => {
  switch (typeof value) {
    case "string":
    case "boolean":
      return value
    case "number":
      if (!Number.isFinite(value)) throw new NotJson(`${where()} is ${value}`)
      return value + 0
    case "undefined":
      throw new NotJson(`${where()} is undefined`)
    case "function":
      throw new NotJson(`${where()} is a function`)
    case "symbol":
      throw new NotJson(`${where()} is a symbol`)
    case "bigint":
      throw new NotJson(`${where()} is a BigInt (send it as a string)`)
    case "object": {
      if (value === null) return null
      if (typeof (value as { toJSON?: unknown }).toJSON === "function") {
        metToJson = true
        return undefined
      }
      if (path.length >= MAX_BODY_DEPTH) {
        throw new NotJson(
          `it is nested more than ${MAX_BODY_DEPTH} levels deep (arrays and objects inside each other); the log takes at most ${MAX_BODY_DEPTH}`
        )
      }
      if (path.includes(value)) throw new NotJson(`${where()} is circular (it contains itself); send a tree`)
      path.push(value)
      let out: unknown
      if (Array.isArray(value)) {
        const copy: Array<unknown> = []
        for (let i = 0; i < value.length; i++) copy.push(copyItem(value[i], () => `${where()}[${i}]`, path))
        out = copy
      } else {
        if (!plainProto(value)) {
          throw new NotJson(
            `${where()} is a ${value.constructor?.name ?? "non-plain object"} (send plain objects and arrays)`
          )
        }
        const copy: Record<string, unknown> = {}
        for (const k in value) {
          if (Object.prototype.hasOwnProperty.call(value, k)) {
            const item = copyItem((value as Record<string, unknown>)[k], () => `${where()}.${k}`, path)
            // An own "__proto__" is data in JSON (JSON.parse makes it an own property), not the prototype.
            if (k === "__proto__") {
              Object.defineProperty(copy, k, { value: item, enumerable: true, writable: true, configurable: true })
            } else copy[k] = item
          }
        }
        out = copy
      }
      path.pop()
      return out
    }
  }
}

const bodyName = (): string => "`body`"

/**
 * The checked message as the JSON text the log writes (`{"channel":…,"to":…,"body":…[,"idempotencyKey":…]}`),
 * its key, and a copy of it as replay will see it (JSON.parse of `json`; `undefined` when the body
 * holds a value with `toJSON`: then parse `json`).
 */
export interface CheckedMessage {
  readonly json: string
  readonly key: string | undefined
  readonly message: OutboundMessage | undefined
}

/** A lone surrogate: with the `u` flag a paired one is a single code point and does not match. */
const LONE_SURROGATE = /[\uD800-\uDFFF]/u

/**
 * Where `s` stops being well-formed UTF-16 (the index of its first lone surrogate), or -1.
 * `String.prototype.isWellFormed` is not on every supported Node, hence the regex.
 */
export const loneSurrogateAt = (s: string): number => {
  const m = LONE_SURROGATE.exec(s)
  return m === null ? -1 : m.index
}

const hex4 = (code: number): string => code.toString(16).toUpperCase().padStart(4, "0")

/**
 * A non-empty, well-formed string. The log stores keys as UTF-8, where a lone surrogate cannot be
 * written: it would come back as U+FFFD and match another key.
 */
const nonEmpty = (name: string, v: unknown): DeliveryLogError | undefined => {
  if (typeof v !== "string" || v.length === 0) {
    return invalid(`Expected \`${name}\` to be a non-empty string, got \`${show(v)}\``)
  }
  const at = loneSurrogateAt(v)
  return at < 0
    ? undefined
    : invalid(
      `Expected \`${name}\` to be well-formed UTF-16, got a lone surrogate \\u${
        hex4(v.charCodeAt(at))
      } at index ${at} of ${show(v)} (UTF-8 cannot store it; it would come back as U+FFFD)`
    )
}

/** Check a message and encode it as JSON; nothing about it is logged (bodies may hold secrets). */
export const checkMessage = (m: OutboundMessage): CheckedMessage | DeliveryLogError => {
  if (m === null || typeof m !== "object") return invalid(`Expected the message to be an object, got \`${show(m)}\``)
  const bad = nonEmpty("channel", m.channel) ??
    nonEmpty("to", m.to) ??
    (m.idempotencyKey === undefined ? undefined : nonEmpty("idempotencyKey", m.idempotencyKey))
  if (bad) return bad
  let body: string
  let copy: unknown
  try {
    metToJson = false
    copy = copyJson(m.body, bodyName, [])
    body = JSON.stringify(m.body)
  } catch (e) {
    if (e instanceof NotJson) return invalid(`Expected \`body\` to be a JSON value: ${e.message}`)
    const circular = e instanceof TypeError && /circular/i.test(e.message)
    return invalid(
      circular
        ? "Expected `body` to be a JSON value: it is circular (it contains itself); send a tree"
        : `Expected \`body\` to be a JSON value: it could not be serialised (${(e as Error).message})`
    )
  }
  const key = m.idempotencyKey === undefined ? "" : `,"idempotencyKey":${JSON.stringify(m.idempotencyKey)}`
  const json = `{"channel":${JSON.stringify(m.channel)},"to":${JSON.stringify(m.to)},"body":${body}${key}}`
  const message: OutboundMessage | undefined = metToJson
    ? undefined
    : m.idempotencyKey === undefined
    ? { channel: m.channel, to: m.to, body: copy }
    : { channel: m.channel, to: m.to, body: copy, idempotencyKey: m.idempotencyKey }
  return { json, key: m.idempotencyKey, message }
}

/** Longest `lastError` / dead-letter reason kept; longer ones are cut (records stay small). */
export const MAX_ERROR_CHARS = 2000

/** Cut an error text to `MAX_ERROR_CHARS`. */
export const clipError = (s: string): string => (s.length <= MAX_ERROR_CHARS ? s : `${s.slice(0, MAX_ERROR_CHARS)}…`)
