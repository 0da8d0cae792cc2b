/**
 * DeliveryQueue — delivers what a `DeliveryLog` holds: replay on start, strict order per recipient,
 * retries with backoff and jitter, dead letters, and a graceful shutdown.
 *
 * Built on `createLanes` keyed by recipient `(channel, to)`: one activation per recipient at a time,
 * at most `concurrency` recipients at once. An activation delivers its recipient's due head entries
 * in `seq` order until none is due; a head waiting for its backoff is woken by a single timer
 * (a min-heap on the Effect `Clock`, so `TestClock` drives it).
 */
import { Cause, Clock, Deferred, Effect, Exit, Option, Random, Scope } from "effect"
import { DeliveryFailure, DeliveryLogError } from "./errors.js"
import type { DeliveryEntry, DeliveryLog, OutboundMessage } from "./types.js"
import { createLanes, LanesConfigInvalid } from "../queue/index.js"
import type { ActivationExit } from "../queue/index.js"

/** Options of {@link make}. Defaults: `concurrency` 8, `attemptTimeoutMs` 30 s, `backoffMs` 5 s, 25 s, 2 min, 10 min, `jitter` 0.2, `maxAttempts` 5. */
export interface Options {
  readonly log: DeliveryLog
  /** Sends one entry. Fail with `DeliveryFailure` (`permanent: true` to give up at once); a defect counts as a failure too. */
  readonly deliver: (entry: DeliveryEntry) => Effect.Effect<void, DeliveryFailure>
  /** Recipients in flight at once. */
  readonly concurrency?: number
  /** An attempt running longer is interrupted and counts as a failure. `Infinity` turns the bound off. */
  readonly attemptTimeoutMs?: number
  /** Delay before the next attempt after the n-th failure: `backoffMs[n - 1]`, the last value repeating. */
  readonly backoffMs?: ReadonlyArray<number>
  /** Each delay is scaled by a uniform factor in `[1 - jitter, 1 + jitter]`. From 0 through 1. */
  readonly jitter?: number
  /** An entry whose attempts reach this number goes to the dead letters. */
  readonly maxAttempts?: number
}

/** What {@link DeliveryQueue.stats} reports. */
export interface Stats {
  /** Entries pending in the log (due or waiting for their backoff). */
  readonly pending: number
  /** Entries in the dead letters. */
  readonly dead: number
  /** `deliver` calls running now. */
  readonly inFlight: number
  /** Entries this queue delivered and acked since `make`. */
  readonly delivered: number
}

/** A running delivery queue over a `DeliveryLog`. */
export interface DeliveryQueue {
  /** Appends the message to the log and returns once it is durable; delivery happens in the background. */
  readonly enqueue: (message: OutboundMessage) => Effect.Effect<DeliveryEntry, DeliveryLogError>
  /** Puts the dead entry `id` (or every dead entry) back to pending with attempts 0; returns how many. */
  readonly retryDead: (id?: string) => Effect.Effect<number, DeliveryLogError>
  /** Waits until nothing pending is due or in flight (entries waiting for a later backoff do not count). */
  readonly idle: Effect.Effect<void>
  readonly stats: Effect.Effect<Stats>
}

/** Delays between retries of a failed log call (ack, attempt record, dead letter); the last repeats. */
const LOG_RETRY_MS: ReadonlyArray<number> = [1_000, 5_000, 30_000]

/** A log call that must succeed before the head entry of a recipient may move on. */
type LogOp =
  | { readonly _tag: "Ack" }
  | { readonly _tag: "Attempt"; readonly error: string; readonly nextAttemptAt: number; readonly dead: boolean }
  | { readonly _tag: "Dead"; readonly reason: string }

interface Node {
  entry: DeliveryEntry
  next: Node | undefined
  /** `deliver` runs for it now. */
  inFlight: boolean
  /** A log call still owed (it failed before); retried at `opRetryAt`. */
  op: LogOp | undefined
  opFailures: number
  opRetryAt: number
}

interface Recipient {
  readonly key: string
  head: Node | undefined
  tail: Node | undefined
  /** Woken in the lanes (queued or running) and not yet past its decision to stop. */
  awake: boolean
  /** The time of this recipient's live entry in the timer heap. */
  wakeAt: number | undefined
}

interface Timer {
  readonly at: number
  readonly rec: Recipient
}

const recipientKey = (message: OutboundMessage): string => JSON.stringify([message.channel, message.to])

const show = (u: unknown): string =>
  typeof u === "number" || typeof u === "bigint" ? String(u) : typeof u === "string" ? `"${u}"` : typeof u === "object" && u !== null ? (Array.isArray(u) ? "array" : "object") : String(u)

const invalid = (field: string, expected: string, value: unknown): Effect.Effect<never> =>
  Effect.die(new LanesConfigInvalid({ field, message: `Expected \`${field}\` to be ${expected}, got \`${show(value)}\`` }))

const isIntFrom1 = (n: unknown): n is number => typeof n === "number" && Number.isInteger(n) && n >= 1

/** The message of a failed attempt, and whether it is permanent. */
const failureOf = (cause: Cause.Cause<unknown>): { readonly message: string; readonly permanent: boolean; readonly defect: boolean } => {
  const error = Cause.findErrorOption(cause)
  if (Option.isSome(error)) {
    const e = error.value as { readonly message?: unknown; readonly permanent?: unknown } | null
    const message = e !== null && typeof e === "object" && typeof e.message === "string" ? e.message : String(error.value)
    return { message, permanent: e !== null && typeof e === "object" && e.permanent === true, defect: false }
  }
  const defect = Cause.findDefect(cause)
  if (defect._tag === "Success") {
    const d = defect.success
    return { message: `deliver died: ${d instanceof Error ? d.message : String(d)}`, permanent: false, defect: true }
  }
  return { message: "deliver was interrupted", permanent: false, defect: false }
}

/** Jittered delay before the next attempt after `attempts` failures. */
const backoffDelay = (backoffMs: ReadonlyArray<number>, jitter: number, attempts: number, random: number): number => {
  const base = backoffMs[Math.min(Math.max(attempts, 1), backoffMs.length) - 1]
  return Math.max(0, Math.round(base * (1 + jitter * (2 * random - 1))))
}

/**
 * Starts delivering what `log` holds and what `enqueue` adds. Every pending entry of the log is
 * scheduled at once, oldest first (due now, or at its `nextAttemptAt`). Entries of one recipient
 * `(channel, to)` are attempted in `seq` order, the next only after the one ahead was acked or
 * dead-lettered. Closing the Scope stops new attempts, waits for those in flight (each bounded by
 * `attemptTimeoutMs`) and flushes the log; what is pending stays in the log for the next start.
 *
 * Invalid options are a defect (`LanesConfigInvalid` naming the option): a queue that cannot run
 * should fail loudly at start, not deliver with silently changed settings.
 */
export const make = (options: Options): Effect.Effect<DeliveryQueue, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { log, deliver } = options
    const concurrency = options.concurrency ?? 8
    const attemptTimeoutMs = options.attemptTimeoutMs ?? 30_000
    const backoffMs = options.backoffMs ?? [5_000, 25_000, 120_000, 600_000]
    const jitter = options.jitter ?? 0.2
    const maxAttempts = options.maxAttempts ?? 5
    if (typeof log !== "object" || log === null) return yield* invalid("log", "a DeliveryLog", log)
    if (typeof deliver !== "function") return yield* invalid("deliver", "a function", deliver)
    if (!isIntFrom1(concurrency)) return yield* invalid("concurrency", "an integer from 1 and up", concurrency)
    if (typeof attemptTimeoutMs !== "number" || !(attemptTimeoutMs > 0)) {
      return yield* invalid("attemptTimeoutMs", "a number above 0 (Infinity for no bound)", attemptTimeoutMs)
    }
    if (!Array.isArray(backoffMs) || backoffMs.length === 0) {
      return yield* invalid("backoffMs", "a non-empty array of delays in ms", backoffMs)
    }
    for (let i = 0; i < backoffMs.length; i++) {
      const b = backoffMs[i]
      if (typeof b !== "number" || !Number.isFinite(b) || b < 0) {
        return yield* invalid(`backoffMs[${i}]`, "a finite number from 0 and up", b)
      }
    }
    if (typeof jitter !== "number" || !(jitter >= 0 && jitter <= 1)) {
      return yield* invalid("jitter", "a number from 0 through 1", jitter)
    }
    if (!isIntFrom1(maxAttempts)) return yield* invalid("maxAttempts", "an integer from 1 and up", maxAttempts)

    const clock = yield* Clock.Clock
    const random = yield* Random.Random
    const now = () => clock.currentTimeMillisUnsafe()

    // ---- state (plain mutable, owned by this queue) ----
    const recipients = new Map<string, Recipient>()
    const byId = new Map<string, Node>()
    let closing = false
    let closed = false
    let awakeCount = 0
    let working = 0 // activations inside an attempt or a log call
    let inFlight = 0
    let delivered = 0
    let drained: Deferred.Deferred<void> | undefined
    let idleWaiters: Array<Deferred.Deferred<void>> = []

    // ---- timer: a min-heap of recipient wakes, one fiber sleeping until the earliest ----
    const heap: Array<Timer> = []
    const heapPush = (t: Timer) => {
      heap.push(t)
      let i = heap.length - 1
      while (i > 0) {
        const p = (i - 1) >> 1
        if (heap[p].at <= t.at) break
        heap[i] = heap[p]
        i = p
      }
      heap[i] = t
    }
    const heapPop = (): Timer | undefined => {
      const top = heap[0]
      const last = heap.pop()
      if (heap.length > 0 && last !== undefined) {
        let i = 0
        const n = heap.length
        for (;;) {
          const l = 2 * i + 1
          if (l >= n) break
          const r = l + 1
          const c = r < n && heap[r].at < heap[l].at ? r : l
          if (heap[c].at >= last.at) break
          heap[i] = heap[c]
          i = c
        }
        heap[i] = last
      }
      return top
    }
    let timerSignal = Deferred.makeUnsafe<void>()
    let timerTarget = Infinity
    const scheduleWake = (rec: Recipient, at: number) => {
      if (rec.wakeAt !== undefined && rec.wakeAt <= at) return
      rec.wakeAt = at
      heapPush({ at, rec })
      if (at < timerTarget) Deferred.doneUnsafe(timerSignal, Effect.void)
    }

    const isIdle = () => closed || (awakeCount === 0 && (heap.length === 0 || heap[0].at > now()))
    const checkIdle = () => {
      if (idleWaiters.length > 0 && isIdle()) {
        const waiters = idleWaiters
        idleWaiters = []
        for (const d of waiters) Deferred.doneUnsafe(d, Effect.void)
      }
    }
    const endWork = () => {
      working--
      if (working === 0 && drained !== undefined) Deferred.doneUnsafe(drained, Effect.void)
    }

    // ---- per-recipient FIFO (singly linked, kept in seq order) ----
    const insert = (node: Node): Recipient => {
      const key = recipientKey(node.entry.message)
      let rec = recipients.get(key)
      if (rec === undefined) {
        rec = { key, head: undefined, tail: undefined, awake: false, wakeAt: undefined }
        recipients.set(key, rec)
      }
      byId.set(node.entry.id, node)
      const seq = node.entry.seq
      if (rec.tail === undefined) {
        rec.head = rec.tail = node
      } else if (rec.tail.entry.seq < seq) {
        rec.tail.next = node
        rec.tail = node
      } else if (!pinned(rec.head!) && seq < rec.head!.entry.seq) {
        node.next = rec.head
        rec.head = node
      } else {
        // Rare (retryDead of an older entry): walk to its place, never ahead of a head being worked on.
        let prev = rec.head!
        while (prev.next !== undefined && prev.next.entry.seq < seq) prev = prev.next
        node.next = prev.next
        prev.next = node
        if (node.next === undefined) rec.tail = node
      }
      return rec
    }
    const removeHead = (rec: Recipient) => {
      const node = rec.head!
      rec.head = node.next
      node.next = undefined
      if (rec.head === undefined) rec.tail = undefined
      byId.delete(node.entry.id)
    }
    const newNode = (entry: DeliveryEntry): Node => ({ entry, next: undefined, inFlight: false, op: undefined, opFailures: 0, opRetryAt: 0 })
    /** A head being delivered, or owing its log record, keeps its place: nothing goes ahead of it. */
    const pinned = (node: Node) => node.inFlight || node.op !== undefined

    // ---- lanes ----
    // Lanes and timer live in a scope of their own, closed by the finalizer only after in-flight work ended.
    const internalScope = yield* Scope.fork(yield* Effect.scope, "sequential")
    const wakeRec = (rec: Recipient): Effect.Effect<void> => {
      if (rec.awake || closing || rec.head === undefined) return Effect.void
      rec.awake = true
      awakeCount++
      return Effect.catch(Effect.asVoid(lanes.wake(rec.key)), () =>
        Effect.sync(() => {
          rec.awake = false
          awakeCount--
          checkIdle()
        }))
    }

    /**
     * Runs the owed log call of the head. On success the head moves on (acked or dead: removed); a recorded
     * attempt that ends in the dead letters goes on with `deadLetter`. On failure the call stays owed and
     * `opRetryAt` says when to retry; `unknown-id` means the log no longer holds the entry: it is dropped.
     */
    const runOp = (rec: Recipient, node: Node): Effect.Effect<void> =>
      Effect.suspend(() => {
        const op = node.op!
        const id = node.entry.id
        const call: Effect.Effect<unknown, DeliveryLogError> = op._tag === "Ack"
          ? log.ack(id)
          : op._tag === "Dead"
          ? log.deadLetter(id, op.reason)
          : Effect.map(log.attempt(id, { error: op.error, nextAttemptAt: op.nextAttemptAt }), (entry) => {
            node.entry = entry
          })
        return Effect.matchEffect(call, {
          onSuccess: () =>
            Effect.sync(() => {
              node.opFailures = 0
              if (op._tag === "Ack") {
                node.op = undefined
                delivered++
                removeHead(rec)
              } else if (op._tag === "Dead") {
                node.op = undefined
                removeHead(rec)
              } else {
                node.op = op.dead ? { _tag: "Dead", reason: op.error } : undefined
              }
            }).pipe(Effect.andThen(Effect.suspend(() => (node.op?._tag === "Dead" ? runOp(rec, node) : Effect.void)))),
          onFailure: (error) => {
            if (error.reason === "unknown-id") {
              removeHead(rec)
              return Effect.logWarning(
                `DeliveryQueue: entry ${id} is no longer in the log (${op._tag.toLowerCase()} failed: ${error.message}); dropping it from memory`
              )
            }
            node.opFailures++
            const delay = LOG_RETRY_MS[Math.min(node.opFailures, LOG_RETRY_MS.length) - 1]
            node.opRetryAt = now() + delay
            return Effect.logWarning(
              `DeliveryQueue: ${op._tag.toLowerCase()} of entry ${id} failed (${error.reason}: ${error.message}); the entry stays in memory and its recipient waits, retrying in ${delay} ms`
            )
          }
        })
      })

    /** One attempt of the head entry, then its record in the log. */
    const attemptHead = (rec: Recipient, node: Node): Effect.Effect<void> =>
      Effect.gen(function*() {
        node.inFlight = true
        inFlight++
        const attempt = Effect.suspend(() => deliver(node.entry))
        const exit = yield* Effect.exit(
          attemptTimeoutMs === Infinity ? attempt : Effect.timeoutOrElse(attempt, {
            duration: attemptTimeoutMs,
            orElse: () => Effect.fail(new DeliveryFailure({ message: `deliver timed out after ${attemptTimeoutMs} ms` }))
          })
        )
        inFlight--
        node.inFlight = false
        if (Exit.isSuccess(exit)) {
          node.op = { _tag: "Ack" }
        } else {
          const failure = failureOf(exit.cause)
          if (failure.defect) {
            yield* Effect.logWarning(`DeliveryQueue: deliver of entry ${node.entry.id} died; counted as a failed attempt`, exit.cause)
          }
          const attempts = node.entry.attempts + 1
          const dead = failure.permanent || attempts >= maxAttempts
          const at = now()
          const nextAttemptAt = dead ? at : at + backoffDelay(backoffMs, jitter, attempts, random.nextDoubleUnsafe())
          node.op = { _tag: "Attempt", error: failure.message, nextAttemptAt, dead }
        }
        yield* runOp(rec, node)
      })

    const activate = (key: string): Effect.Effect<void> =>
      Effect.gen(function*() {
        const rec = recipients.get(key)
        if (rec === undefined) return
        for (;;) {
          const node = rec.head
          if (closing || node === undefined) {
            rec.awake = false
            awakeCount--
            if (node === undefined && recipients.get(key) === rec) recipients.delete(key)
            break
          }
          const due = node.op !== undefined ? node.opRetryAt : (node.entry.nextAttemptAt ?? 0)
          if (due > now()) {
            rec.awake = false
            awakeCount--
            scheduleWake(rec, due)
            break
          }
          working++
          yield* Effect.ensuring(node.op !== undefined ? runOp(rec, node) : attemptHead(rec, node), Effect.sync(endWork))
          // A log call that failed set node.opRetryAt: the next turn sees the head not due and sleeps.
        }
        checkIdle()
      }).pipe(
        Effect.onExit((exit) =>
          Effect.sync(() => {
            if (Exit.isSuccess(exit)) return
            // Interrupted by close, or a bug: never leave the recipient stuck while the queue runs.
            const rec = recipients.get(key)
            if (rec !== undefined && rec.awake) {
              rec.awake = false
              awakeCount--
              if (!closing && rec.head !== undefined) scheduleWake(rec, now() + LOG_RETRY_MS[0])
              checkIdle()
            }
          })
        )
      )

    const onExit = (exit: ActivationExit<string, never>) =>
      exit._tag === "ActivationFailed"
        ? Effect.logWarning(`DeliveryQueue: delivery to ${exit.key} stopped by a defect; retrying`, exit.cause)
        : Effect.void

    const lanes = yield* createLanes<string>({ maxConcurrent: concurrency, activate, onExit }).pipe(
      Effect.orDie,
      Scope.provide(internalScope)
    )

    const timerLoop = Effect.gen(function*() {
      for (;;) {
        const t = now()
        while (heap.length > 0 && heap[0].at <= t) {
          const { at, rec } = heapPop()!
          if (rec.wakeAt !== at) continue // superseded by an earlier wake
          rec.wakeAt = undefined
          yield* wakeRec(rec)
        }
        checkIdle()
        timerSignal = Deferred.makeUnsafe<void>()
        if (heap.length === 0) {
          timerTarget = Infinity
          yield* Deferred.await(timerSignal)
        } else {
          timerTarget = heap[0].at
          yield* Effect.raceFirst(Effect.sleep(timerTarget - t), Deferred.await(timerSignal))
        }
      }
    })
    yield* Effect.forkIn(timerLoop, internalScope)

    // ---- shutdown: stop new attempts, let those in flight end, close the lanes, flush ----
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        closing = true
        if (working > 0) {
          drained = Deferred.makeUnsafe<void>()
          yield* Deferred.await(drained)
        }
        yield* Scope.close(internalScope, Exit.void)
        yield* Effect.catch(log.flush, (error) =>
          Effect.logWarning(`DeliveryQueue: flushing the log on close failed (${error.reason}: ${error.message})`))
        closed = true
        checkIdle()
      })
    )

    // ---- replay: every pending entry, oldest first ----
    const pending = yield* log.pending
    for (const entry of pending) {
      if (entry.status === "pending" && !byId.has(entry.id)) insert(newNode(entry))
    }
    // Map order is the order of each recipient's oldest entry: recipients are woken oldest first.
    for (const rec of Array.from(recipients.values())) yield* scheduleHead(rec)

    function scheduleHead(rec: Recipient): Effect.Effect<void> {
      const head = rec.head
      if (head === undefined || rec.awake) return Effect.void
      const due = head.op !== undefined ? head.opRetryAt : (head.entry.nextAttemptAt ?? 0)
      if (due > now()) {
        scheduleWake(rec, due)
        return Effect.void
      }
      return wakeRec(rec)
    }

    /** Takes an entry the log holds as pending into memory and schedules its recipient. */
    const admit = (entry: DeliveryEntry): Effect.Effect<void> => {
      if (byId.has(entry.id) || entry.status !== "pending") return Effect.void
      return scheduleHead(insert(newNode(entry)))
    }

    const enqueue = (message: OutboundMessage): Effect.Effect<DeliveryEntry, DeliveryLogError> =>
      Effect.flatMap(log.append(message), (entry) => {
        if (byId.has(entry.id)) return Effect.succeed(entry)
        if (message.idempotencyKey === undefined) return Effect.as(admit(entry), entry)
        // A duplicate key returns an existing entry that may be acked or dead: schedule only what the log holds as pending.
        return Effect.flatMap(log.get(entry.id), (current) =>
          Option.isSome(current) && current.value.status === "pending"
            ? Effect.as(admit(current.value), entry)
            : Effect.succeed(entry))
      })

    const requeueOne = (entry: DeliveryEntry): Effect.Effect<number, DeliveryLogError> =>
      Effect.gen(function*() {
        yield* log.requeue(entry.id)
        const fresh = yield* log.get(entry.id)
        const pendingEntry: DeliveryEntry = Option.isSome(fresh) && fresh.value.status === "pending"
          ? fresh.value
          : { ...entry, status: "pending", attempts: 0 }
        yield* admit(pendingEntry)
        return 1
      })

    const retryDead = (id?: string): Effect.Effect<number, DeliveryLogError> =>
      id === undefined
        ? Effect.gen(function*() {
          const dead = yield* log.dead
          let count = 0
          for (const entry of dead) count += yield* requeueOne(entry)
          return count
        })
        : Effect.gen(function*() {
          const found = yield* log.get(id)
          if (Option.isNone(found)) {
            return yield* new DeliveryLogError({ reason: "unknown-id", message: `Expected \`id\` to name an entry of the log, got \`${id}\`` })
          }
          return found.value.status === "dead" ? yield* requeueOne(found.value) : 0
        })

    const idle: Effect.Effect<void> = Effect.suspend(() => {
      if (isIdle()) return Effect.void
      const d = Deferred.makeUnsafe<void>()
      idleWaiters.push(d)
      return Deferred.await(d)
    })

    const stats: Effect.Effect<Stats> = Effect.map(log.stats, (s) => ({ pending: s.pending, dead: s.dead, inFlight, delivered }))

    return { enqueue, retryDead, idle, stats } satisfies DeliveryQueue
  })
