/**
 * One attempt of a recipient's head entry, and the log calls a head owes: the durable "attempt
 * started" mark before `deliver`, then the outcome (ack, failed attempt, dead letter) recorded in
 * the log. Internal to `DeliveryQueue`, on its state (below `DeliveryQueue.ts`, which runs the
 * recipients' turns).
 */
import { Effect, Exit } from "effect"
import type { Random } from "effect"
import type { makeJudge } from "./classify.js"
import { retryDelay } from "./classify.js"
import type { Policy } from "./deliveryPolicy.js"
import { backoffDelay, failureOf, LOG_RETRY_MS } from "./deliveryPolicy.js"
import type { DeliveryLogError } from "./errors.js"
import { DeliveryFailure } from "./errors.js"
import type { Options } from "./queueTypes.js"
import type { Node, Recipient, Recipients } from "./recipients.js"

/** The queue's counters the attempts move (read by `stats`). */
export interface AttemptCounts {
  /** Attempts inside `deliver` now. */
  inFlight: number
  /** Entries acked since the start. */
  delivered: number
}

export const makeAttempts = (q: {
  readonly log: Options["log"]
  readonly deliver: Options["deliver"]
  readonly held: Recipients
  readonly policy: Policy
  readonly judge: ReturnType<typeof makeJudge>
  readonly random: Random.Random
  readonly now: () => number
  readonly counts: AttemptCounts
  /** Whether the entry will be attempted as soon as it is head (its mark may go ahead of that). */
  readonly willAttempt: (n: Node) => boolean
}) => {
  const { log, deliver, held, policy, judge, random, now, counts, willAttempt } = q
  const { attemptTimeoutMs, maxAttempts } = policy
  const lastStep = policy.backoffMs[policy.backoffMs.length - 1]
  /** The log's "attempt started" mark, when it has one (optional on the interface). */
  const markOf = log.markStarted
  /** The log's ack with the next entry's mark in one call, when it has one. */
  const ackAndMarkOf = log.ackAndMark

  /**
   * Runs the owed log call of the head. On success the head moves on (acked or dead: removed); the last
   * failed attempt is one `attempt` record with `dead: true` (a crash cannot leave it half done). On failure the call stays owed and
   * `opRetryAt` says when to retry; `unknown-id` or `not-pending` means the log no longer holds the entry as pending: it is dropped.
   */
  const runOp = (rec: Recipient, node: Node, markNext?: Node): Effect.Effect<void> =>
    Effect.suspend(() => {
      const op = node.op!
      const id = node.entry.id
      const call: Effect.Effect<unknown, DeliveryLogError> = op._tag === "Ack"
        ? markNext === undefined || ackAndMarkOf === undefined
          ? log.ack(id)
          : Effect.map(ackAndMarkOf(id, markNext.entry.id), (marked) => {
            if (marked) markNext.premarked = true
          })
        : op._tag === "Dead"
        ? log.deadLetter(id, op.reason)
        : Effect.map(
          log.attempt(id, { error: op.error, nextAttemptAt: op.nextAttemptAt, dead: op.dead }),
          (entry) => {
            node.entry = entry
          }
        )
      return Effect.matchEffect(call, {
        onSuccess: () =>
          Effect.sync(() => {
            node.opFailures = 0
            if (op._tag === "Ack") {
              node.op = undefined
              counts.delivered++
              held.removeHead(rec)
            } else if (op._tag === "Dead" || op.dead) {
              // The last failed attempt moved the entry to dead in the same record.
              node.op = undefined
              held.removeHead(rec)
            } else {
              node.op = undefined
            }
          }),
        onFailure: (error) => {
          // Gone from the log, or dead-lettered there by someone else meanwhile (`not-pending`: the log
          // keeps it dead, `retryDead` brings it back): either way the head is not the queue's to retry.
          if (error.reason === "unknown-id" || error.reason === "not-pending") {
            held.removeHead(rec)
            return Effect.logWarning(
              `DeliveryQueue: entry ${id} is no longer pending in the log (${op._tag.toLowerCase()} failed: ${error.message}); dropping it from memory`
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

  /**
   * Writes the durable "attempt started" mark (when the log has one). False when it could not: the
   * head waits `LOG_RETRY_MS` and tries again, no attempt counted; an entry the log no longer holds
   * as pending (gone, or dead) is dropped from memory.
   */
  const markStarted = (rec: Recipient, node: Node): Effect.Effect<boolean> => {
    const mark = markOf
    if (mark === undefined) return Effect.succeed(true)
    if (node.premarked) {
      node.premarked = false
      return Effect.succeed(true)
    }
    const id = node.entry.id
    return Effect.matchEffect(mark(id), {
      onSuccess: () =>
        Effect.sync(() => {
          node.opFailures = 0
          return true
        }),
      onFailure: (error) => {
        if (error.reason === "unknown-id" || error.reason === "not-pending") {
          held.removeHead(rec)
          return Effect.as(
            Effect.logWarning(
              `DeliveryQueue: entry ${id} is no longer pending in the log (${error.message}); dropping it from memory`
            ),
            false
          )
        }
        node.opFailures++
        const delay = LOG_RETRY_MS[Math.min(node.opFailures, LOG_RETRY_MS.length) - 1]
        node.entry = { ...node.entry, nextAttemptAt: now() + delay }
        return Effect.as(
          Effect.logWarning(
            `DeliveryQueue: the attempt-started mark of entry ${id} failed (${error.reason}: ${error.message}); not delivering it before the mark is durable, retrying in ${delay} ms`
          ),
          false
        )
      }
    })
  }

  /** Writes `n`'s mark ahead of its attempt; a failure is left to `markStarted` at the attempt. */
  const premark = (n: Node, mark: NonNullable<typeof markOf>): Effect.Effect<void> =>
    Effect.matchEffect(mark(n.entry.id), {
      onSuccess: () => Effect.sync(() => void (n.premarked = true)),
      onFailure: () => Effect.void
    })

  /** One attempt of the head entry (after its durable "attempt started" mark), then its record in the log. */
  const attemptHead = (rec: Recipient, node: Node): Effect.Effect<void> =>
    Effect.gen(function*() {
      if (!(yield* markStarted(rec, node))) return
      node.inFlight = true
      counts.inFlight++
      const attempt = Effect.suspend(() => deliver(node.entry))
      const exit = yield* Effect.exit(
        attemptTimeoutMs === Infinity ? attempt : Effect.timeoutOrElse(attempt, {
          duration: attemptTimeoutMs,
          orElse: () => Effect.fail(new DeliveryFailure({ message: `deliver timed out after ${attemptTimeoutMs} ms` }))
        })
      )
      counts.inFlight--
      node.inFlight = false
      if (Exit.isSuccess(exit)) {
        node.op = { _tag: "Ack" }
      } else {
        const failure = failureOf(exit.cause)
        if (failure.defect) {
          yield* Effect.logWarning(
            `DeliveryQueue: deliver of entry ${node.entry.id} died; counted as a failed attempt`,
            exit.cause
          )
        }
        const attempts = node.entry.attempts + 1
        const at = now()
        const verdict = yield* judge(failure.error, node.entry, at)
        const dead = verdict.permanent || attempts >= maxAttempts
        const step = backoffDelay(policy, attempts, random.nextDoubleUnsafe())
        const nextAttemptAt = dead ? at : at + retryDelay(step, verdict.retryAfterMs, lastStep)
        node.op = { _tag: "Attempt", error: failure.message, nextAttemptAt, dead }
      }
      // The next entry's mark goes in the same group commit as this ack: one sync for both (one call
      // when the log has `ackAndMark`; else the two calls side by side).
      const next = node.next
      yield* markOf === undefined || !Exit.isSuccess(exit) || next === undefined || !willAttempt(next)
        ? runOp(rec, node)
        : ackAndMarkOf !== undefined
        ? runOp(rec, node, next)
        : Effect.asVoid(Effect.all([runOp(rec, node), premark(next, markOf)], { concurrency: 2 }))
    })

  return { runOp, attemptHead }
}
