/**
 * An in-memory `DeliveryLog` for fast unit tests of the delivery queue: the same contract as the file
 * log (seq order, idempotency keys and their 24 h window, bad input, unknown-id, ack idempotent within
 * the window, closed;
 * checked by DeliveryQueue.memoryLog.test.ts against test/delivery/contract.ts), no disk. Fault injection: `failNext(op)`
 * makes the next call(s) of `op` fail with a `DeliveryLogError`; `hold(op)` parks the next call until
 * released. Every call is recorded in `calls`.
 */
import { Clock, Deferred, Effect, Option } from "effect"
import type { Scope } from "effect"
import { DeliveryLogError } from "../../src/delivery/errors.js"
import type { DeliveryLogErrorReason } from "../../src/delivery/errors.js"
import type { DeliveryEntry, DeliveryLog, DeliveryLogHealth, OutboundMessage } from "../../src/delivery/types.js"

export type LogOpName = "append" | "attempt" | "ack" | "deadLetter" | "requeue" | "markStarted" | "flush" | "compact"

export type LogCall =
  | { readonly op: "append"; readonly id: string; readonly message: OutboundMessage }
  | {
    readonly op: "attempt"
    readonly id: string
    readonly error: string
    readonly nextAttemptAt: number
    readonly at: number
  }
  | { readonly op: "ack" | "requeue" | "markStarted"; readonly id: string }
  | { readonly op: "deadLetter"; readonly id: string; readonly reason: string }
  | { readonly op: "flush" | "compact" }

export interface MemoryLog extends DeliveryLog {
  /** Every mutating call in order, failed ones included (`failed: true`). */
  readonly calls: Array<LogCall & { readonly failed: boolean }>
  /** The next `times` calls of `op` fail with `reason` (default `"io"`). */
  readonly failNext: (op: LogOpName, times?: number, reason?: DeliveryLogErrorReason) => void
  /** The next call of `op` waits until the returned release runs; `reached` completes when it arrives. */
  readonly hold: (op: LogOpName) => { readonly reached: Deferred.Deferred<void>; readonly release: Effect.Effect<void> }
  /** Ids acked so far, in order. */
  readonly acked: Array<string>
  /** From now on every call fails with `reason: "closed"` (what closing a store's Scope does). */
  readonly close: () => void
  /**
   * Sets what `health` says. While it is `failing`, every mutating call fails fast with its `error`
   * (as the file log does until it has re-opened itself); `{ status: "ok" }` heals it.
   */
  readonly setHealth: (health: DeliveryLogHealth) => void
  /** Puts an entry in as it would be after a restart (keeps its seq, attempts, nextAttemptAt). */
  readonly seed: (entry: Omit<DeliveryEntry, "seq" | "status" | "id"> & { readonly id?: string }) => DeliveryEntry
}

const DEDUPE_WINDOW_MS = 24 * 60 * 60 * 1000
const MAX_RECORD_BYTES = 1024 * 1024

/** Why `body` is not a JSON value (strict: no undefined, NaN, BigInt, functions or cycles), or undefined. */
const notJson = (value: unknown, seen: Set<object>): string | undefined => {
  if (value === null || typeof value === "string" || typeof value === "boolean") return undefined
  if (typeof value === "number") return Number.isFinite(value) ? undefined : `the number ${value}`
  if (typeof value !== "object") return `a ${typeof value}`
  if (seen.has(value)) return "a cycle"
  seen.add(value)
  const values = Array.isArray(value) ? value : Object.values(value)
  for (const v of values) {
    const why = notJson(v, seen)
    if (why !== undefined) return why
  }
  seen.delete(value)
  return undefined
}

const invalid = (message: string) => new DeliveryLogError({ reason: "invalid", message })

/** Checks a message as the file log does; the error, or the byte size of its JSON. */
const check = (message: OutboundMessage): DeliveryLogError | number => {
  if (typeof message.channel !== "string" || message.channel.length === 0) {
    return invalid("Expected `channel` to be a non-empty string, got `\"\"`")
  }
  if (typeof message.to !== "string" || message.to.length === 0) {
    return invalid("Expected `to` to be a non-empty string, got `\"\"`")
  }
  const why = notJson(message.body, new Set())
  if (why !== undefined) return invalid(`Expected \`body\` to be a JSON value, got ${why}`)
  const bytes = Buffer.byteLength(JSON.stringify(message))
  if (bytes > MAX_RECORD_BYTES) {
    return new DeliveryLogError({
      reason: "too-large",
      message: `Expected the message to fit \`maxRecordBytes\` (${MAX_RECORD_BYTES}), got ${bytes} bytes`
    })
  }
  return bytes
}

/** The memory log as a scoped store (closing the Scope closes it), e.g. for the DeliveryLog contract. */
export const makeMemoryLogScoped = (): Effect.Effect<MemoryLog, never, Scope.Scope> =>
  Effect.acquireRelease(Effect.sync(makeMemoryLog), (log) => Effect.sync(log.close))

export interface MemoryLogOptions {
  /**
   * When an append takes its seq: `"call"` (default, like the file log: in call order, before a `hold`)
   * or `"completion"` (after a `hold`: a held append gets a later seq than one that started after it).
   */
  readonly seqAt?: "call" | "completion"
}

export const makeMemoryLog = (options: MemoryLogOptions = {}): MemoryLog => {
  let seq = 0
  let closed = false
  /** Acked entries that carried an idempotency key, with when they were acked. */
  const ackedKeys = new Map<string, { readonly entry: DeliveryEntry; readonly at: number }>()
  const live = new Map<string, DeliveryEntry>() // pending and dead, insertion = seq order
  const keys = new Map<string, DeliveryEntry>()
  const calls: Array<LogCall & { readonly failed: boolean }> = []
  const acked: Array<string> = []
  /** When each id was acked, while `ack` of it still succeeds (a compaction forgets ids past the window). */
  const ackedAt = new Map<string, number>()
  const faults = new Map<LogOpName, { times: number; reason: DeliveryLogErrorReason }>()
  let health: DeliveryLogHealth = { status: "ok" }
  const holds = new Map<LogOpName, { reached: Deferred.Deferred<void>; gate: Deferred.Deferred<void> }>()

  const guard = <A>(op: LogOpName, call: LogCall | undefined, body: () => A): Effect.Effect<A, DeliveryLogError> =>
    Effect.gen(function*() {
      const held = holds.get(op)
      if (held !== undefined) {
        holds.delete(op)
        Deferred.doneUnsafe(held.reached, Effect.void)
        yield* Deferred.await(held.gate)
      }
      if (closed) {
        return yield* new DeliveryLogError({ reason: "closed", message: "The memory log is closed; make a new one" })
      }
      if (health.status === "failing") {
        if (call) calls.push({ ...call, failed: true })
        return yield* health.error
      }
      const fault = faults.get(op)
      if (fault !== undefined && fault.times > 0) {
        fault.times--
        if (call) calls.push({ ...call, failed: true })
        return yield* new DeliveryLogError({ reason: fault.reason, message: `injected ${op} failure` })
      }
      const result = body()
      if (call) calls.push({ ...call, failed: false })
      return result
    })

  const unknown = (id: string) => new DeliveryLogError({ reason: "unknown-id", message: `No entry \`${id}\`` })
  const mustGet = (id: string): DeliveryEntry => {
    const e = live.get(id)
    if (e === undefined) throw unknown(id)
    return e
  }
  const lift = <A>(op: LogOpName, call: LogCall, body: () => A) =>
    Effect.catchDefect(guard(op, call, body), (d) => (d instanceof DeliveryLogError ? Effect.fail(d) : Effect.die(d)))

  const log: MemoryLog = {
    calls,
    acked,
    failNext: (op, times = 1, reason = "io") => {
      faults.set(op, { times, reason })
    },
    hold: (op) => {
      const h = { reached: Deferred.makeUnsafe<void>(), gate: Deferred.makeUnsafe<void>() }
      holds.set(op, h)
      return { reached: h.reached, release: Effect.asVoid(Deferred.succeed(h.gate, undefined)) }
    },
    seed: (e) => {
      const s = ++seq
      const entry: DeliveryEntry = { ...e, id: e.id ?? `m-${s}`, seq: s, status: "pending" }
      live.set(entry.id, entry)
      return entry
    },
    close: () => {
      closed = true
    },
    setHealth: (h) => {
      health = h
    },
    health: Effect.sync(() => health),
    append: (message) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        if (closed) {
          return Effect.fail(
            new DeliveryLogError({ reason: "closed", message: "The memory log is closed; make a new one" })
          )
        }
        if (health.status === "failing") return Effect.fail(health.error)
        if (message.idempotencyKey !== undefined) {
          const existing = keys.get(message.idempotencyKey)
          if (existing !== undefined) {
            const current = live.get(existing.id)
            if (current !== undefined) return Effect.succeed(current)
            const acked = ackedKeys.get(message.idempotencyKey)
            if (acked !== undefined && now - acked.at < DEDUPE_WINDOW_MS) return Effect.succeed(acked.entry)
            keys.delete(message.idempotencyKey)
            ackedKeys.delete(message.idempotencyKey)
          }
        }
        const checked = check(message)
        if (typeof checked !== "number") return Effect.fail(checked)
        // Like the file log, seq is taken when the call is made (in call order), even if it completes later.
        const early = options.seqAt === "completion" ? undefined : ++seq
        return lift(
          "append",
          { op: "append", id: early === undefined ? "(at completion)" : `m-${early}`, message },
          () => {
            const s = early ?? ++seq
            const id = `m-${s}`
            const entry: DeliveryEntry = { id, seq: s, message, enqueuedAt: now, attempts: 0, status: "pending" }
            live.set(entry.id, entry)
            if (message.idempotencyKey !== undefined) keys.set(message.idempotencyKey, entry)
            return entry
          }
        )
      }),
    attempt: (id, failure) =>
      Effect.flatMap(Clock.currentTimeMillis, (at) =>
        lift("attempt", { op: "attempt", id, ...failure, at }, () => {
          const { maybeSent: _m, ...e } = mustGet(id)
          if (e.status === "dead") {
            throw new DeliveryLogError({
              reason: "not-pending",
              message: `Expected a pending entry to record an attempt of, got dead entry \`${id}\``
            })
          }
          if (failure.dead === true) {
            const { nextAttemptAt: _n, ...rest } = e
            const next: DeliveryEntry = { ...rest, attempts: e.attempts + 1, lastError: failure.error, status: "dead" }
            live.set(id, next)
            return next
          }
          const next: DeliveryEntry = {
            ...e,
            attempts: e.attempts + 1,
            lastError: failure.error,
            nextAttemptAt: failure.nextAttemptAt
          }
          live.set(id, next)
          return next
        })),
    ack: (id) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        lift("ack", { op: "ack", id }, () => {
          if (ackedAt.has(id) && !live.has(id)) return
          const e = mustGet(id)
          if (e.status === "dead") {
            throw new DeliveryLogError({
              reason: "not-pending",
              message: `Expected a pending entry to ack, got dead entry \`${id}\``
            })
          }
          live.delete(id)
          acked.push(id)
          ackedAt.set(id, now)
          if (e.message.idempotencyKey !== undefined) ackedKeys.set(e.message.idempotencyKey, { entry: e, at: now })
        })),
    deadLetter: (id, reason) =>
      lift("deadLetter", { op: "deadLetter", id, reason }, () => {
        const e = mustGet(id)
        live.set(id, { ...e, status: "dead", lastError: reason })
      }),
    requeue: (id) =>
      lift("requeue", { op: "requeue", id }, () => {
        const e = mustGet(id)
        const { nextAttemptAt: _n, maybeSent: _m, ...rest } = e
        live.set(id, { ...rest, status: "pending", attempts: 0 })
      }),
    markStarted: (id) =>
      lift("markStarted", { op: "markStarted", id }, () => {
        const e = mustGet(id)
        if (e.status === "dead") {
          throw new DeliveryLogError({
            reason: "not-pending",
            message: `Expected a pending entry to start an attempt of, got dead entry \`${id}\``
          })
        }
        if (e.maybeSent !== true) live.set(id, { ...e, maybeSent: true })
      }),
    get: (id) => Effect.sync(() => Option.fromNullishOr(live.get(id))),
    pending: Effect.sync(() => [...live.values()].filter((e) => e.status === "pending").sort((a, b) => a.seq - b.seq)),
    dead: Effect.sync(() => [...live.values()].filter((e) => e.status === "dead").sort((a, b) => a.seq - b.seq)),
    stats: Effect.sync(() => {
      let pending = 0
      let dead = 0
      for (const e of live.values()) {
        if (e.status === "pending") pending++
        else dead++
      }
      return { pending, dead, segments: 0, bytes: 0 }
    }),
    flush: lift("flush", { op: "flush" }, () => undefined),
    compact: Effect.flatMap(Clock.currentTimeMillis, (now) =>
      lift("compact", { op: "compact" }, () => {
        // As the stores do: an id acked before the window is forgotten (its ack is then unknown-id).
        for (const [id, at] of ackedAt) if (now - at >= DEDUPE_WINDOW_MS) ackedAt.delete(id)
      }))
  }
  return log
}
