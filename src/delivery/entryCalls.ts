/**
 * The log core's calls on an entry already appended (attempt, ack, dead letter, requeue, the
 * attempt-started mark) and `flush`: each checks its input against the state, stages its record and
 * changes the state in one synchronous step (the order replay applies them), then completes once the
 * record is durable; and the reads of committed entries. The append path stays in logCore.ts.
 */
import type { DeliveryLogError } from "./errors.js"
import { invalid, notPending, unknownId } from "./logErrors.js"
import { Kind } from "./record.js"
import type { LogState } from "./state.js"
import type { DeliveryEntry } from "./types.js"
import { clipError } from "./validate.js"

/** Completion of a call: an error, or the value. */
export type Done<A> = (error: DeliveryLogError | undefined, value?: A) => void

/** What the calls need of the core that owns the state and the writer. */
export interface CallHost {
  readonly state: LogState
  /** The reason every call fails now, if any. */
  refuse(): DeliveryLogError | undefined
  /** A call at time `now`: remember it, and forget what the dedupe window let go of by then. */
  touch(now: number): void
  /** Stage an id-keyed record (see `stageIdRecord`), taking the next lsn if it was staged. */
  frameId(
    kind: Kind,
    id: string,
    fixed: number,
    text: string | undefined,
    what: string,
    fill?: (buf: Buffer, at: number) => void
  ): DeliveryLogError | undefined
  /** Complete `done` once everything queued so far is durable. */
  afterDurable<A>(value: () => A, done: Done<A>): void
  /** Complete `done` with `value` once the record just staged is durable. */
  pushed<A>(value: A, done: Done<A>): void
}

export const attempt = (
  h: CallHost,
  id: string,
  failure: { readonly error: string; readonly nextAttemptAt: number; readonly dead?: boolean },
  done: Done<DeliveryEntry>
): void => {
  const no = h.refuse()
  if (no) return done(no)
  if (failure === null || typeof failure !== "object" || typeof failure.error !== "string") {
    return done(invalid(`Expected \`error\` to be a string, got \`${typeof failure?.error}\``))
  }
  if (typeof failure.nextAttemptAt !== "number" || !Number.isFinite(failure.nextAttemptAt)) {
    return done(
      invalid(`Expected \`nextAttemptAt\` to be an epoch-ms number, got \`${String(failure.nextAttemptAt)}\``)
    )
  }
  const live = h.state.live.get(id)
  if (live === undefined) return done(unknownId(String(id)))
  if (live.status === "dead") {
    return done(
      notPending(`Expected a pending entry, got dead entry \`${id}\`; requeue it before recording an attempt`)
    )
  }
  const attempts = live.attempts + 1
  const lastError = clipError(failure.error)
  const next = failure.nextAttemptAt
  const dead = failure.dead === true
  const no2 = h.frameId(dead ? Kind.attemptDead : Kind.attempt, id, 12, lastError, "the attempt", (b, at) => {
    b.writeUInt32BE(attempts, at)
    b.writeDoubleBE(next, at + 4)
  })
  if (no2) return done(no2)
  h.state.applyAttempt(id, attempts, lastError, next)
  if (dead) h.state.applyDead(id, lastError)
  // The entry as of this attempt (a later call may change it before this one is durable).
  h.pushed(live.toEntry(), done)
}

export const ack = (h: CallHost, id: string, now: number, done: Done<void>): void => {
  const no = h.refuse()
  if (no) return done(no)
  h.touch(now)
  const slot = h.state.live.slotOf(id)
  if (slot >= 0 && h.state.live.isDead(slot)) {
    return done(
      notPending(
        `Expected a pending entry to ack, got dead entry \`${id}\`; it stays in the dead letters (requeue it to deliver it again)`
      )
    )
  }
  if (slot < 0) {
    // Acked already (within the window): idempotent, once that ack is durable.
    if (h.state.acked.has(id)) return h.afterDurable(() => undefined, done)
    return done(unknownId(String(id)))
  }
  const no2 = h.frameId(Kind.ack, id, 8, undefined, "the ack", (b, at) => b.writeDoubleBE(now, at))
  if (no2) return done(no2)
  h.state.applyAck(id, now)
  h.pushed(undefined, done)
}

export const deadLetter = (h: CallHost, id: string, reason: string, done: Done<void>): void => {
  const no = h.refuse()
  if (no) return done(no)
  if (typeof reason !== "string") {
    return done(invalid(`Expected \`reason\` to be a string, got \`${typeof reason}\``))
  }
  const slot = h.state.live.slotOf(id)
  if (slot < 0) return done(unknownId(String(id)))
  if (h.state.live.isDead(slot)) return h.afterDurable(() => undefined, done)
  const clipped = clipError(reason)
  const no2 = h.frameId(Kind.dead, id, 0, clipped, "the dead-letter reason")
  if (no2) return done(no2)
  h.state.applyDead(id, clipped)
  h.pushed(undefined, done)
}

export const requeue = (h: CallHost, id: string, done: Done<void>): void => {
  const no = h.refuse()
  if (no) return done(no)
  const slot = h.state.live.slotOf(id)
  if (slot < 0) return done(unknownId(String(id)))
  if (!h.state.live.isDead(slot)) return h.afterDurable(() => undefined, done)
  const no2 = h.frameId(Kind.requeue, id, 0, undefined, "the requeue")
  if (no2) return done(no2)
  h.state.applyRequeue(id)
  h.pushed(undefined, done)
}

export const markStarted = (h: CallHost, id: string, done: Done<void>): void => {
  const no = h.refuse()
  if (no) return done(no)
  const live = h.state.live
  const slot = live.slotOf(id)
  if (slot < 0) return done(unknownId(String(id)))
  if (live.isDead(slot)) {
    return done(
      notPending(`Expected a pending entry to start an attempt of, got dead entry \`${id}\`; requeue it first`)
    )
  }
  // Marked already (a replayed entry whose last attempt has no outcome): the mark holds once durable.
  if (live.isStarted(slot)) return h.afterDurable(() => undefined, done)
  const no2 = h.frameId(Kind.started, id, 0, undefined, "the attempt-started mark")
  if (no2) return done(no2)
  h.state.applyStarted(id)
  h.pushed(undefined, done)
}

/**
 * `ack(id)`, then `markStarted(next)`, staged in one synchronous step (the mark after the ack, so
 * they share a commit); `done` runs once both completed, with the ack's error and the mark's.
 */
export const ackAndMark = (
  h: CallHost,
  id: string,
  next: string,
  now: number,
  done: (ackError: DeliveryLogError | undefined, markError: DeliveryLogError | undefined) => void
): void => {
  let ackError: DeliveryLogError | undefined
  let acked = false
  let marked = false
  let markError: DeliveryLogError | undefined
  ack(h, id, now, (e) => {
    ackError = e
    acked = true
    if (marked) done(ackError, markError)
  })
  markStarted(h, next, (e) => {
    markError = e
    marked = true
    if (acked) done(ackError, markError)
  })
}

export const flush = (h: CallHost, done: Done<void>): void => {
  const no = h.refuse()
  if (no) return done(no)
  h.afterDurable(() => undefined, done)
}

/** Committed entry `id`, if pending or dead (a fresh object: its message parsed from the log's text). */
export const get = (state: LogState, id: string): DeliveryEntry | undefined => {
  const s = state.live.slotOf(id)
  return s >= 0 && state.live.isCommitted(s) ? state.live.toEntry(s) : undefined
}

/** Committed entries with `status`, in seq order (fresh objects). */
export const list = (state: LogState, status: "pending" | "dead"): Array<DeliveryEntry> => {
  const out: Array<DeliveryEntry> = []
  const live = state.live
  const dead = status === "dead"
  for (const s of live.slots()) if (live.isCommitted(s) && live.isDead(s) === dead) out.push(live.toEntry(s))
  return out
}
