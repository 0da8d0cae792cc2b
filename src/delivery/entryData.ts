/**
 * `EntryData`: an entry as the log holds it in memory (its message as JSON text or arena bytes, its
 * delivery state kept small). The record payloads that carry it are in payload.ts.
 */
import { recycledRead, type TextChunk } from "./textArena.js"
import type { DeliveryEntry, OutboundMessage } from "./types.js"

/** UTF-8 bytes of `s`. */
export const utf8Bytes = (s: string): number => Buffer.byteLength(s, "utf8")

/** An entry's attempt state, once it has any (a fresh entry has none: no object for it). */
class Attempts {
  constructor(
    public attempts: number,
    public lastError: string | undefined,
    public nextAttemptAt: number | undefined,
    public started: boolean
  ) {}
}

/** `EntryData.flags`: the entry is dead; its append record is durable. */
const DEAD = 1
const COMMITTED = 2

/** `enqueuedAt` as two small integers (high and low 26 bits), when it is a whole number of ms in [0, 2^53) (not -0). */
const TIME_SPLIT = 2 ** 26

/**
 * An entry as the log holds it: the message as its JSON text (parsed into a fresh object on every
 * read), the delivery state as plain fields. One shape for every entry (fast property access).
 *
 * What every pending entry keeps is kept small, because it stays in the heap until acked and the
 * collector copies and marks it: the attempt state (`attempts`, `lastError`, `nextAttemptAt`,
 * `started`) is an object of its own made at the first attempt or mark (a fresh entry has none), and
 * `enqueuedAt` is held as two small integers (a number field holding a time would be a heap number of its
 * own); the accessors read and write them as plain fields.
 */
export class EntryData {
  /** The message's JSON text as a string, or `undefined` while its bytes are in `arena`. */
  private textString: string | undefined
  /** The arena chunk holding the text's bytes (an appended entry; textArena.ts). */
  private arena: TextChunk | undefined = undefined
  /** Where the text is in `arena`: its offset × 4, + 1 when it is ASCII, + 2 once released. */
  private textAt = 0
  /** Bytes of the text in `arena`. */
  textBytes = 0
  /** `enqueuedAt`: `timeHigh * TIME_SPLIT + timeLow`, or `timeLow` itself when `timeHigh` is -1. */
  private timeHigh: number
  private timeLow: number
  /** The attempt state; `undefined`: none yet (0 attempts, no error, no time, not started). */
  private tries: Attempts | undefined = undefined
  /** `DEAD` (else pending) | `COMMITTED`: one small integer for `status` and `committed`. */
  private flags: number

  constructor(
    readonly id: string,
    readonly seq: number,
    enqueuedAt: number,
    /** `message.idempotencyKey`, kept apart so that replay need not parse the message. */
    readonly key: string | undefined,
    /**
     * The message as JSON, exactly as written: `{"channel":…,"to":…,"body":…[,"idempotencyKey":…]}`;
     * `undefined` only for an entry whose text goes into an arena (`TextArena.put`) next.
     */
    text: string | undefined,
    attempts: number,
    lastError: string | undefined,
    nextAttemptAt: number | undefined,
    status: "pending" | "dead",
    committed: boolean,
    /** Bytes its latest state takes on disk, roughly: counted as live weight for compaction. */
    public bytes: number,
    started = false,
    /**
     * Where its record is (addresses.ts): a checkpoint points at it instead of copying the entry, and the
     * dedupe window keeps it for a keyed entry once it is acked. -1: not known.
     */
    public pos = -1
  ) {
    this.textString = text
    this.flags = (status === "dead" ? DEAD : 0) | (committed ? COMMITTED : 0)
    if (Number.isSafeInteger(enqueuedAt) && (enqueuedAt > 0 || Object.is(enqueuedAt, 0))) {
      this.timeHigh = Math.floor(enqueuedAt / TIME_SPLIT)
      this.timeLow = enqueuedAt - this.timeHigh * TIME_SPLIT
    } else {
      this.timeHigh = -1
      this.timeLow = enqueuedAt
    }
    if (attempts !== 0 || lastError !== undefined || nextAttemptAt !== undefined || started) {
      this.tries = new Attempts(attempts, lastError, nextAttemptAt, started)
    }
  }

  get status(): "pending" | "dead" {
    return (this.flags & DEAD) === 0 ? "pending" : "dead"
  }
  set status(s: "pending" | "dead") {
    this.flags = s === "dead" ? this.flags | DEAD : this.flags & ~DEAD
  }

  /** Its append record is durable (reads hide it before). */
  get committed(): boolean {
    return (this.flags & COMMITTED) !== 0
  }
  set committed(b: boolean) {
    this.flags = b ? this.flags | COMMITTED : this.flags & ~COMMITTED
  }

  /** Epoch ms of the append. */
  get enqueuedAt(): number {
    return this.timeHigh < 0 ? this.timeLow : this.timeHigh * TIME_SPLIT + this.timeLow
  }

  /**
   * Set field `k` of the attempt state to `v` (`atDefault`: the value a fresh entry has): the state is made
   * on the first write that is not a default, and dropped again once every field is back at its default
   * (one representation for one state, so that equal entries compare equal).
   */
  private setTry<K extends keyof Attempts>(k: K, v: Attempts[K], atDefault: boolean): void {
    let t = this.tries
    if (t === undefined) {
      if (atDefault) return
      t = this.tries = new Attempts(0, undefined, undefined, false)
    }
    t[k] = v
    if (t.attempts === 0 && t.lastError === undefined && t.nextAttemptAt === undefined && !t.started) {
      this.tries = undefined
    }
  }

  get attempts(): number {
    return this.tries === undefined ? 0 : this.tries.attempts
  }
  set attempts(n: number) {
    this.setTry("attempts", n, n === 0)
  }

  get lastError(): string | undefined {
    return this.tries?.lastError
  }
  set lastError(e: string | undefined) {
    this.setTry("lastError", e, e === undefined)
  }

  get nextAttemptAt(): number | undefined {
    return this.tries?.nextAttemptAt
  }
  set nextAttemptAt(at: number | undefined) {
    this.setTry("nextAttemptAt", at, at === undefined)
  }

  /** An attempt was started (kind 7) and no outcome recorded since: reads `maybeSent: true`. */
  get started(): boolean {
    return this.tries !== undefined && this.tries.started
  }
  set started(b: boolean) {
    this.setTry("started", b, !b)
  }

  /** The message as JSON, exactly as written (made from the arena's bytes when it is there). */
  get text(): string {
    const s = this.textString
    if (s !== undefined) return s
    return this.arena!.text(this.textAt >>> 2, this.textBytes, (this.textAt & 1) !== 0)
  }

  /** The text is in an arena chunk (not a string of its own). */
  get inArena(): boolean {
    return this.arena !== undefined
  }

  /** UTF-8 bytes of `text`. */
  get textLength(): number {
    return this.textString === undefined ? this.textBytes : utf8Bytes(this.textString)
  }

  /** Write `text` as UTF-8 at `buf[at]` (from the arena's bytes when it is there); returns its end. */
  writeText(buf: Buffer, at: number): number {
    const s = this.textString
    if (s !== undefined) return at + buf.write(s, at, "utf8")
    const from = this.textAt >>> 2
    const chunk = this.arena!
    if (chunk.buf.length === 0) throw recycledRead(chunk.no)
    return at + chunk.buf.copy(buf, at, from, from + this.textBytes)
  }

  /** The text is `chunk.buf[at, at + bytes)` from now on (`TextArena.put`). */
  holdText(chunk: TextChunk, at: number, bytes: number, ascii: boolean): void {
    this.arena = chunk
    this.textAt = at * 4 + (ascii ? 1 : 0)
    this.textBytes = bytes
  }

  /** Mark the text released (the entry left the log); returns its chunk if it held one and was not released yet. */
  releaseText(): TextChunk | undefined {
    if (this.arena === undefined || (this.textAt & 2) !== 0) return undefined
    this.textAt |= 2
    return this.arena
  }

  /** If the text is (unreleased) in `chunk`, make it a string and let go of the chunk. */
  ownText(chunk: TextChunk): void {
    if (this.arena !== chunk || (this.textAt & 2) !== 0) return
    this.textString = chunk.text(this.textAt >>> 2, this.textBytes, (this.textAt & 1) !== 0)
    this.arena = undefined
  }

  /** A copy of the current state (compaction writes copies while the live ones go on changing). */
  clone(): EntryData {
    const c = new EntryData(
      this.id,
      this.seq,
      this.enqueuedAt,
      this.key,
      this.textString,
      this.attempts,
      this.lastError,
      this.nextAttemptAt,
      this.status,
      this.committed,
      this.bytes,
      this.started,
      this.pos
    )
    // The chunk's bytes never change: the copy reads them for as long as it lives (not an owner of the chunk).
    c.arena = this.arena
    c.textAt = this.textAt & ~2
    c.textBytes = this.textBytes
    return c
  }

  /** A fresh `DeliveryEntry`: its message parsed from `text`, or `message` when the caller has that copy already. */
  toEntry(message: OutboundMessage = JSON.parse(this.text) as OutboundMessage): DeliveryEntry {
    const e: { -readonly [K in keyof DeliveryEntry]: DeliveryEntry[K] } = {
      id: this.id,
      seq: this.seq,
      message,
      enqueuedAt: this.enqueuedAt,
      attempts: this.attempts,
      status: this.status
    }
    if (this.lastError !== undefined) e.lastError = this.lastError
    if (this.nextAttemptAt !== undefined) e.nextAttemptAt = this.nextAttemptAt
    if (this.started) e.maybeSent = true
    return e
  }
}
