/**
 * DeliveryQueue — delivers what a `DeliveryLog` holds: replay on start, strict order per recipient,
 * retries with backoff and jitter, dead letters, and a graceful shutdown.
 *
 * Built on `createLanes` keyed by recipient `(channel, to)`: one activation per recipient at a time,
 * at most `concurrency` recipients at once. An activation delivers its recipient's due head entries
 * in `seq` order until none is due (after `TURN_BATCH` in a row it hands its slot on, so one busy
 * recipient cannot starve the others); a head waiting for its backoff is woken by a single timer
 * (a min-heap on the Effect `Clock`, so `TestClock` drives it).
 *
 * Before `deliver` the log gets a durable "attempt started" mark (`markStarted`, when the store has
 * it); a replayed entry whose mark has no outcome arrives `maybeSent`. The mark of a recipient's next
 * entry is written with the ack ahead of it (one group commit), and a recipient's first message, when a
 * slot is free for it, is appended with its mark in one commit (`appendAndMark`). Every failure goes through `classify`
 * (HTTP status, `Retry-After`: classify.ts); `maxAgeMs` expires entries at replay and before each
 * attempt; `replay` paces what the log held at start (replayPacer.ts); retries.ts has `retryDead` and
 * `retryNow`; attempts.ts one attempt of a head and the log calls it owes. This file runs the
 * recipients' turns, replay at start, `enqueue` and shutdown.
 */
import { Clock, Deferred, Effect, Exit, Option, Random, Scope } from "effect"
import { createLanes } from "../queue/index.js"
import type { ActivationExit } from "../queue/index.js"
import { makeAttempts } from "./attempts.js"
import type { AttemptCounts } from "./attempts.js"
import { type Classification, defaultClassify as defaultClassifyImpl, makeJudge } from "./classify.js"
import { LOG_RETRY_MS, resolvePolicy, TURN_BATCH } from "./deliveryPolicy.js"
import type { DeliveryLogError } from "./errors.js"
import type { DeliveryQueue, Options, Stats } from "./queueTypes.js"
import { AppendOrder, dueAt, recipientKey, Recipients } from "./recipients.js"
import type { Node, Recipient } from "./recipients.js"
import { makePacer } from "./replayPacer.js"
import { makeRetries } from "./retries.js"
import type { DeliveryEntry, OutboundMessage } from "./types.js"
import { makeTimer } from "./WakeHeap.js"

export type { Classification, Classify } from "./classify.js"
export type { DeliveryQueue, Options, Stats } from "./queueTypes.js"

/**
 * The default classifier: `permanent` on the error decides when set; otherwise an HTTP `status` 4xx is
 * permanent except 408, 409, 425 and 429; 5xx, connection errors, timeouts and defects retry.
 * `retryAfterMs`, or a `Retry-After` the error carries (`retryAfter`: seconds or an HTTP date, or a
 * `headers` map), replaces that attempt's backoff step, kept within `[jittered step / 4, last step]`.
 * `now` (epoch ms, default `Date.now()`) is what an HTTP date is counted from.
 */
export const defaultClassify: (error: unknown, entry?: DeliveryEntry, now?: number) => Classification =
  defaultClassifyImpl

/**
 * Starts delivering what `log` holds and what `enqueue` adds. Every pending entry of the log is
 * scheduled at once, oldest first (due now, or at its `nextAttemptAt`). Entries of one recipient
 * `(channel, to)` are attempted in `seq` order, the next only after the one ahead was acked or
 * dead-lettered. Closing the Scope stops new attempts, waits for those in flight (each bounded by
 * `attemptTimeoutMs`) and flushes the log; what is pending stays in the log for the next start.
 *
 * Invalid options are a defect (`LanesConfigInvalid` naming the option, e.g. "Expected `concurrency`
 * to be an integer from 1 and up, got `0`"): a queue that cannot run as configured fails loudly at
 * start rather than delivering with silently changed settings.
 */
export const make = (options: Options): Effect.Effect<DeliveryQueue, never, Scope.Scope> =>
  Effect.gen(function*() {
    const policy = yield* resolvePolicy(options)
    const { log, deliver } = options
    const { maxAttempts, maxAgeMs } = policy
    const clock = yield* Clock.Clock
    const random = yield* Random.Random
    const now = () => clock.currentTimeMillisUnsafe()

    // ---- state (plain mutable, owned by this queue) ----
    const held = new Recipients()
    let closing = false
    let closed = false
    let awakeCount = 0
    let working = 0 // activations inside an attempt or a log call
    const counts: AttemptCounts = { inFlight: 0, delivered: 0 }
    let drained: Deferred.Deferred<void> | undefined
    let idleWaiters: Array<Deferred.Deferred<void>> = []

    // ---- timer: one fiber sleeping until the earliest recipient wake ----
    const timer = makeTimer<Recipient>(now, (rec) => wakeRec(rec), () => checkIdle())
    const scheduleWake = timer.schedule
    const pacer = policy.replayPerSecond === Infinity && policy.maxRecoveryMs === Infinity
      ? undefined
      : makePacer<Recipient>({
        now,
        startAt: now(),
        perSecond: policy.replayPerSecond,
        maxRecoveryMs: policy.maxRecoveryMs,
        wake: (rec) => wakeRec(rec)
      })
    const expired = (entry: DeliveryEntry, at: number) => at - entry.enqueuedAt >= maxAgeMs
    /** The recipient's replayed entries go without pacing from now on (a new message or retryNow for it). */
    const unpace = (rec: Recipient) => {
      if (pacer === undefined) return
      for (let n = rec.head; n !== undefined; n = n.next) n.replayed = false
      pacer.forget(rec)
    }

    const isIdle = () => closed || (awakeCount === 0 && !timer.hasDue())
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

    // ---- lanes ----
    // Lanes and timer live in a scope of their own, closed by the finalizer only after in-flight work ended.
    const internalScope = yield* Scope.fork(yield* Effect.scope, "sequential")
    const wakeRec = (rec: Recipient): Effect.Effect<void> => {
      if (rec.awake || closing || rec.head === undefined) return Effect.void
      rec.awake = true
      awakeCount++
      return Effect.catch(Effect.asVoid(lanes.wake(rec.key)), () =>
        Effect.sync(() => {
          settle(rec)
          checkIdle()
        }))
    }

    /** The entry will be attempted as soon as it is head: due, not expired, not waiting for replay's pacing. */
    const willAttempt = (n: Node): boolean =>
      !closing && n.op === undefined && !n.premarked && !(n.replayed && pacer !== undefined) && dueAt(n) <= now() &&
      !expired(n.entry, now())
    const { runOp, attemptHead } = makeAttempts({
      log,
      deliver,
      held,
      policy,
      judge: makeJudge(options.classify),
      random,
      now,
      counts,
      willAttempt
    })
    /** The recipient stops being awake: its activation decided to end (or never will run). */
    const settle = (rec: Recipient) => {
      if (rec.awake) {
        rec.awake = false
        awakeCount--
      }
    }

    const activate = (key: string): Effect.Effect<void> =>
      Effect.gen(function*() {
        const rec = held.byKey.get(key)
        if (rec === undefined) return
        for (let turns = 0;; turns++) {
          const node = rec.head
          if (closing || node === undefined) {
            settle(rec)
            held.release(rec)
            break
          }
          const due = dueAt(node)
          if (due > now()) {
            settle(rec)
            scheduleWake(rec, due)
            break
          }
          if (turns === TURN_BATCH) {
            // Fairness: hand the slot on; the owed follow-up joins the tail of the lanes' queue. Still awake.
            const woken = yield* Effect.exit(lanes.wake(key))
            if (Exit.isFailure(woken)) settle(rec)
            break
          }
          if (node.op === undefined && !node.inFlight) {
            if (expired(node.entry, now())) {
              node.op = { _tag: "Dead", reason: "expired" }
            } else if (node.replayed && pacer !== undefined) {
              const gate = pacer.admit(rec)
              if (gate !== "go") {
                // "wait": the pacer wakes it when its turn comes; "stop": it stays pending until a new
                // message for this recipient, retryNow, or the next start.
                settle(rec)
                break
              }
              node.replayed = false
            }
          }
          working++
          yield* Effect.ensuring(
            node.op !== undefined ? runOp(rec, node) : attemptHead(rec, node),
            Effect.sync(endWork)
          )
          // A log call that failed set node.opRetryAt: the next turn sees the head not due and sleeps.
        }
        checkIdle()
      }).pipe(
        Effect.onExit((exit) =>
          Effect.sync(() => {
            if (Exit.isSuccess(exit)) return
            // Interrupted by close, or a bug: never leave the recipient stuck while the queue runs.
            const rec = held.byKey.get(key)
            if (rec !== undefined && rec.awake) {
              settle(rec)
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

    const lanes = yield* createLanes<string>({ maxConcurrent: policy.concurrency, activate, onExit }).pipe(
      Effect.orDie,
      Scope.provide(internalScope)
    )

    yield* Effect.forkIn(timer.run, internalScope)
    if (pacer !== undefined) yield* Effect.forkIn(pacer.run, internalScope)

    // ---- shutdown: stop new attempts, let those in flight end, close the lanes, flush ----
    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        closing = true
        if (working > 0) {
          drained = Deferred.makeUnsafe<void>()
          yield* Deferred.await(drained)
        }
        yield* Scope.close(internalScope, Exit.void)
        yield* Effect.catch(
          log.flush,
          (error) =>
            Effect.logWarning(`DeliveryQueue: flushing the log on close failed (${error.reason}: ${error.message})`)
        )
        closed = true
        checkIdle()
      })
    )

    // ---- replay: every pending entry, oldest first ----
    // One that already used maxAttempts (this queue's, which may be lower than the one that recorded the
    // attempts) goes to dead without another attempt; if that write fails, its recipient owes it.
    // One pending longer than maxAgeMs goes to dead as "expired".
    const pending = yield* log.pending
    const startedAt = now()
    const reasonOf = (e: DeliveryEntry) =>
      expired(e, startedAt)
        ? "expired"
        : `reached maxAttempts (${maxAttempts}) with ${e.attempts} attempts${
          e.lastError === undefined ? "" : `; last error: ${e.lastError}`
        }`
    const spent = pending.filter((e) => e.status === "pending" && (e.attempts >= maxAttempts || expired(e, startedAt)))
    const deadExits = yield* Effect.forEach(spent, (e) => Effect.exit(log.deadLetter(e.id, reasonOf(e))), {
      concurrency: 64
    })
    const owed = new Set(spent.filter((_, i) => Exit.isFailure(deadExits[i]!)).map((e) => e.id))
    const spentIds = new Set(spent.map((e) => e.id))
    for (const entry of pending) {
      if (entry.status !== "pending" || held.byId.has(entry.id)) continue
      if (spentIds.has(entry.id) && !owed.has(entry.id)) continue
      held.insert(entry)
      const node = held.byId.get(entry.id)!
      node.replayed = true
      if (owed.has(entry.id)) node.op = { _tag: "Dead", reason: reasonOf(entry) }
    }
    // Map order is the order of each recipient's oldest entry: recipients are woken oldest first.
    for (const rec of Array.from(held.byKey.values())) yield* scheduleHead(rec)

    function scheduleHead(rec: Recipient): Effect.Effect<void> {
      const head = rec.head
      if (head === undefined || rec.awake) return Effect.void
      const due = dueAt(head)
      if (due > now()) {
        scheduleWake(rec, due)
        return Effect.void
      }
      return wakeRec(rec)
    }

    /** Takes an entry the log holds as pending into memory and schedules its recipient. */
    const admit = (entry: DeliveryEntry): Effect.Effect<void> => {
      const premarked = markedAtAppend.delete(entry.id)
      if (held.byId.has(entry.id) || entry.status !== "pending") return Effect.void
      const rec = held.insert(entry)
      if (premarked) held.byId.get(entry.id)!.premarked = true
      // A new message is held behind its recipient's older entries only, never behind replay's pacing.
      unpace(rec)
      return scheduleHead(rec)
    }

    // Appended entries are admitted in seq order, whatever order concurrent appends complete in.
    const appendOrder = new AppendOrder()
    // A recipient's first message, when a slot is free for it, is appended with its attempt-started mark
    // in one commit (`appendAndMark`): one sync fewer for a message sent on its own (the chatbot's reply).
    // Only then: a mark written for an entry that then waits reads `maybeSent` after a crash, never attempted.
    const appendAndMarkOf = log.markStarted === undefined ? undefined : log.appendAndMark
    /** Appends in flight per recipient key (only counted when the log has `appendAndMark`). */
    const appending = new Map<string, number>()
    /** Appends with their mark in flight: each will take a slot once admitted. */
    let marking = 0
    /** Entries appended with their mark, until admitted (then their node is `premarked`). */
    const markedAtAppend = new Set<string>()
    /** Appends; returns the entry for the caller and the entry to schedule (none for a duplicate that is not pending). */
    const append = (
      message: OutboundMessage,
      withMark: boolean
    ): Effect.Effect<readonly [DeliveryEntry, DeliveryEntry | undefined], DeliveryLogError> =>
      Effect.flatMap(
        withMark
          ? Effect.map(appendAndMarkOf!(message), ([entry, marked]) => {
            if (marked) markedAtAppend.add(entry.id)
            return [entry, marked] as const
          })
          : Effect.map(log.append(message), (entry) => [entry, false] as const),
        ([entry, marked]) => {
          if (held.byId.has(entry.id) || message.idempotencyKey === undefined) {
            return Effect.succeed([entry, entry] as const)
          }
          // A duplicate key returns an existing entry that may be acked or dead: schedule only what the log holds as pending.
          return Effect.map(
            log.get(entry.id),
            (current) =>
              [
                entry,
                Option.isNone(current) || current.value.status !== "pending"
                  ? undefined
                  // Marked: this call wrote a new record and its mark. Read back, it says `maybeSent` (this mark,
                  // which no crash left), and its first attempt would look like a replay's (seen: the Telegram bot
                  // said of each keyed reply "may have gone out before the restart"): it is scheduled as appended.
                  : marked
                  ? entry
                  : current.value
              ] as const
          )
        }
      )

    const enqueue = (message: OutboundMessage): Effect.Effect<DeliveryEntry, DeliveryLogError> =>
      // Not interruptible: an entry that reached the log is always scheduled, never left for the next start.
      Effect.uninterruptible(Effect.suspend(() => {
        const ticket = appendOrder.take()
        let key: string | undefined
        let withMark = false
        if (appendAndMarkOf !== undefined) {
          key = recipientKey(message)
          const ahead = appending.get(key) ?? 0
          withMark = ahead === 0 && !closing && held.byKey.get(key)?.head === undefined &&
            awakeCount + marking < policy.concurrency
          appending.set(key, ahead + 1)
          if (withMark) marking++
        }
        return append(message, withMark).pipe(
          Effect.onExit((exit) =>
            Effect.forEach(appendOrder.settle(ticket, Exit.isSuccess(exit) ? exit.value[1] : undefined), admit, {
              discard: true
            }).pipe(Effect.ensuring(Effect.sync(() => {
              if (key === undefined) return
              if (withMark) marking--
              const left = appending.get(key)! - 1
              if (left === 0) appending.delete(key)
              else appending.set(key, left)
            })))
          ),
          Effect.map(([entry]) => entry)
        )
      }))

    const { retryDead, retryNow } = makeRetries({ log, held, now, admit, scheduleHead, unpace })

    const idle: Effect.Effect<void> = Effect.suspend(() => {
      if (isIdle()) return Effect.void
      const d = Deferred.makeUnsafe<void>()
      idleWaiters.push(d)
      return Deferred.await(d)
    })

    const stats: Effect.Effect<Stats> = Effect.map(
      log.stats,
      (s) => ({ pending: s.pending, dead: s.dead, inFlight: counts.inFlight, delivered: counts.delivered })
    )

    return { enqueue, retryDead, retryNow, idle, stats } satisfies DeliveryQueue
  })
