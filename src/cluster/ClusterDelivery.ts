/**
 * Delivering from the Postgres outbox from many processes at once. Each process claims the due head of
 * each recipient under a lease (`PgDeliveryLog.claim`), delivers it, and acks, records the failed
 * attempt, or dead-letters it, with the retry rules of the single-process `DeliveryQueue`
 * (backoff with jitter, `maxAttempts`, permanent failures). A recipient's next entry is claimable only
 * once the one ahead of it was acked or dead-lettered, so order per recipient holds across processes.
 */
import { Clock, Deferred, Duration, Effect, Exit, Fiber, Scope } from "effect"
import type { DeliveryFailure, DeliveryLogError } from "../delivery/errors.js"
import type { DeliveryEntry, OutboundMessage } from "../delivery/types.js"
import type { PgDeliveryLog } from "./PgDeliveryLog.js"

/** Options of {@link make}; the retry options mean what they mean for `DeliveryQueue.make`. */
export interface ClusterDeliveryOptions {
  readonly log: PgDeliveryLog
  readonly deliver: (entry: DeliveryEntry) => Effect.Effect<void, DeliveryFailure>
  /** This process' name in the leases; default a random id. */
  readonly owner?: string
  /** Entries in flight at once in this process, default 8. */
  readonly concurrency?: number
  /** Default 30_000. */
  readonly attemptTimeoutMs?: number
  /** Default [5_000, 25_000, 120_000, 600_000]. */
  readonly backoffMs?: ReadonlyArray<number>
  /** Default 0.2. */
  readonly jitter?: number
  /** Default 5. */
  readonly maxAttempts?: number
  /** How often to look for due entries when nothing woke it, default 250. */
  readonly pollMs?: number
  /** How long a claim holds an entry; must exceed `attemptTimeoutMs`. Default `attemptTimeoutMs + 10_000`. */
  readonly leaseMs?: number
  /**
   * How long the loop waits, once woken, for more work before its next statement, so that the acks of
   * deliveries that end close together and the claims of entries appended close together share one
   * statement (an ack waits at most this long; a crash before it is written redelivers the entry).
   * With a backlog (its last claim filled every free slot) it waits only until every attempt in flight
   * ended, if sooner: their acks are all there is to gather, and more entries wait already. Default 0.
   */
  readonly batchMs?: number
}

/** A delivering process of the cluster. */
export interface ClusterDelivery {
  readonly owner: string
  /** Appends durably, then wakes the claim loop of this process. */
  readonly enqueue: (message: OutboundMessage) => Effect.Effect<DeliveryEntry, DeliveryLogError>
  /** Wakes the claim loop: something was appended to the log (by a turn's commit, say). */
  readonly wake: () => void
  /** Counts of this process: entries in flight, delivered (acked), failed attempts, dead-lettered. */
  readonly stats: Effect.Effect<{
    readonly inFlight: number
    readonly delivered: number
    readonly failedAttempts: number
    readonly deadLettered: number
  }>
  /**
   * Delivers what is due until nothing is (a recipient's entries one after the other, as always), then
   * stops claiming and lets attempts in flight end, all within `timeoutMs` (default `attemptTimeoutMs +
   * 1000`), then gives back what it still holds.
   * Closing the Scope does the same; a second call waits for the first.
   */
  readonly stop: (timeoutMs?: number) => Effect.Effect<void>
}

/** Starts the claim loop in the Scope; closing it stops claiming, lets attempts in flight end, and gives back what it still holds. */
export const make = (options: ClusterDeliveryOptions): Effect.Effect<ClusterDelivery, never, Scope.Scope> =>
  Effect.gen(function*() {
    const log = options.log
    const owner = options.owner ?? `delivery-${crypto.randomUUID()}`
    const concurrency = Math.max(1, options.concurrency ?? 8)
    const attemptTimeoutMs = options.attemptTimeoutMs ?? 30_000
    const backoffMs = options.backoffMs ?? [5_000, 25_000, 120_000, 600_000]
    const jitter = options.jitter ?? 0.2
    const maxAttempts = options.maxAttempts ?? 5
    const pollMs = options.pollMs ?? 250
    const batchMs = Math.max(0, options.batchMs ?? 0)
    const leaseMs = Math.max(options.leaseMs ?? attemptTimeoutMs + 10_000, attemptTimeoutMs + 1_000)

    let inFlight = 0
    let delivered = 0
    let failedAttempts = 0
    let deadLettered = 0
    let stopping = false
    /** `stop` was called: the loop claims what is due until nothing is, then ends (within the stop's time). */
    let finishing = false
    let wake = Deferred.makeUnsafe<void>()
    const poke = () => {
      Deferred.doneUnsafe(wake, Effect.void)
    }
    const scope = yield* Effect.scope
    // Attempts live in a scope of their own, closed by the finalizer only after they had their time.
    const attempts = yield* Scope.make()
    let idleWaiter: Deferred.Deferred<void> | undefined
    /** Opened when the last attempt in flight ends: the loop, with a backlog, claims again then. */
    let allEnded: Deferred.Deferred<void> | undefined
    // Delivered entries whose ack the loop writes with its next claim (one statement for both).
    let acks: Array<string> = []

    const settle = (entry: DeliveryEntry, failure: DeliveryFailure | undefined) =>
      Effect.gen(function*() {
        if (failure === undefined) {
          acks.push(entry.id)
          delivered++
          return
        }
        const attempts = entry.attempts + 1
        if (failure.permanent === true || attempts >= maxAttempts) {
          yield* log.deadLetter(entry.id, failure.message)
          deadLettered++
          return
        }
        const base = backoffMs[Math.min(attempts - 1, backoffMs.length - 1)] ?? 0
        const factor = 1 + (Math.random() * 2 - 1) * jitter
        const now = yield* Clock.currentTimeMillis
        yield* log.attempt(entry.id, { error: failure.message, nextAttemptAt: now + Math.round(base * factor) })
        failedAttempts++
      })

    const attempt = (entry: DeliveryEntry) =>
      options.deliver(entry).pipe(
        Effect.timeoutOrElse({
          duration: Duration.millis(attemptTimeoutMs),
          orElse: () =>
            Effect.fail({ message: `Delivery attempt timed out after ${attemptTimeoutMs} ms` } as DeliveryFailure)
        }),
        Effect.matchEffect({
          onSuccess: () => settle(entry, undefined),
          onFailure: (failure) => settle(entry, failure)
        }),
        // A log failure leaves the lease to run out: another process (or this one) tries again later.
        Effect.catch((e: DeliveryLogError) => Effect.logWarning(`Delivery of ${entry.id} not recorded: ${e.message}`)),
        Effect.ensuring(Effect.sync(() => {
          inFlight--
          if (idleWaiter !== undefined && inFlight === 0) Deferred.doneUnsafe(idleWaiter, Effect.void)
          if (allEnded !== undefined && inFlight === 0) Deferred.doneUnsafe(allEnded, Effect.void)
          poke()
        }))
      )

    /** Writes the acks gathered so far and claims up to `room` entries, in one statement. */
    const ackAndClaim = (room: number) =>
      Effect.suspend(() => {
        const writing = acks
        acks = []
        const restore = Effect.sync(() => {
          acks = [...writing, ...acks]
        })
        return log.ackAndClaim({ acks: writing, owner, limit: room, leaseMs }).pipe(
          // Acking twice is harmless (an acked entry is left as it is): give them back to the next statement.
          Effect.onInterrupt(() => restore),
          Effect.catch((e) =>
            Effect.as(
              // Written with the next statement (or, failing that, the leases run out and they are delivered again).
              Effect.andThen(restore, Effect.logWarning(`Delivery claim failed: ${e.message}`)),
              [] as ReadonlyArray<DeliveryEntry>
            )
          )
        )
      })

    /**
     * Whether the last claim filled every free slot (more entries are likely due): the loop then gathers acks
     * only until the attempts in flight ended, not for `batchMs`. Until session 14 it always waited `batchMs`:
     * with 8 slots and 50 ms, at most 160 deliveries a second, fewer than one runner's turns at the cluster
     * bench's rate, whose outbox fell behind by thousands of entries.
     */
    let backlog = false
    const loop = Effect.gen(function*() {
      while (!stopping) {
        const current = wake
        const room = concurrency - inFlight
        let claimedNone = false
        if (room > 0 || acks.length > 0) {
          const claimed = yield* ackAndClaim(Math.max(0, room))
          for (const entry of claimed) {
            inFlight++
            yield* Effect.forkIn(attempt(entry), attempts)
          }
          if (room > 0) backlog = claimed.length === room
          if (room > 0 && claimed.length === room) continue
          claimedNone = room > 0 && claimed.length === 0
        }
        // Finishing (see `stop`): done once nothing is due, nothing is in flight and every ack is written.
        if (finishing && claimedNone && inFlight === 0 && acks.length === 0) return
        const woken = yield* Deferred.await(current).pipe(
          Effect.as(true),
          Effect.timeoutOrElse({ duration: Duration.millis(pollMs), orElse: () => Effect.succeed(false) })
        )
        if (current === wake) wake = Deferred.makeUnsafe<void>()
        if (woken && batchMs > 0) {
          if (!backlog) yield* Effect.sleep(Duration.millis(batchMs))
          else if (inFlight > 0) {
            const ended = Deferred.makeUnsafe<void>()
            allEnded = ended
            yield* Deferred.await(ended).pipe(
              Effect.timeoutOrElse({ duration: Duration.millis(batchMs), orElse: () => Effect.void }),
              Effect.ensuring(Effect.sync(() => {
                if (allEnded === ended) allEnded = undefined
              }))
            )
          }
        }
      }
    })
    const fiber = yield* Effect.forkIn(Effect.interruptible(loop), scope)

    let stopped: Deferred.Deferred<void> | undefined
    const stop = (timeoutMs = attemptTimeoutMs + 1_000): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (stopped !== undefined) return Deferred.await(stopped)
        const done = Deferred.makeUnsafe<void>()
        stopped = done
        return Effect.gen(function*() {
          const start = yield* Clock.currentTimeMillis
          // What is due goes out before leaving, within the same time: a reply its turn committed just
          // before the stop (the loop claims `batchMs` after a wake, or at its next poll) would otherwise
          // wait for the next start, or for another runner's poll. The loop goes on claiming (a
          // recipient's next entry once its previous one is acked) until nothing is due and nothing is in
          // flight, then ends by itself.
          finishing = true
          poke()
          yield* Fiber.await(fiber).pipe(
            Effect.timeoutOrElse({ duration: Duration.millis(Math.max(0, timeoutMs)), orElse: () => Effect.void })
          )
          stopping = true
          yield* Fiber.interrupt(fiber)
          const left = Math.max(0, timeoutMs - ((yield* Clock.currentTimeMillis) - start))
          if (inFlight > 0) {
            idleWaiter = Deferred.makeUnsafe<void>()
            yield* Deferred.await(idleWaiter).pipe(
              Effect.timeoutOrElse({ duration: Duration.millis(left), orElse: () => Effect.void })
            )
          }
          // Attempts that did not end are interrupted; their leases are given back below.
          yield* Scope.close(attempts, Exit.void)
          if (acks.length > 0) yield* Effect.ignore(ackAndClaim(0))
          const held = yield* Effect.orElseSucceed(log.leased(owner), () => [] as ReadonlyArray<string>)
          for (const id of held) yield* Effect.ignore(log.release(id, owner))
        }).pipe(Effect.ensuring(Deferred.succeed(done, undefined)))
      })
    yield* Effect.addFinalizer(() => stop())

    return {
      owner,
      enqueue: (message) => Effect.tap(log.append(message), () => Effect.sync(poke)),
      wake: poke,
      stats: Effect.sync(() => ({ inFlight, delivered, failedAttempts, deadLettered })),
      stop
    }
  })
