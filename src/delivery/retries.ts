/**
 * The delivery queue's retry controls: `retryDead` (dead entries back to pending, in the log) and
 * `retryNow` (pending entries due now, in memory). Internal to `DeliveryQueue`, on its state.
 */
import type { Cause } from "effect"
import { Effect, Exit, Option } from "effect"
import { DeliveryLogError } from "./errors.js"
import type { Recipient, Recipients } from "./recipients.js"
import type { DeliveryEntry, DeliveryLog } from "./types.js"

export const makeRetries = (q: {
  readonly log: DeliveryLog
  readonly held: Recipients
  readonly now: () => number
  /** Takes an entry the log holds as pending into memory and schedules its recipient. */
  readonly admit: (entry: DeliveryEntry) => Effect.Effect<void>
  readonly scheduleHead: (rec: Recipient) => Effect.Effect<void>
  /** The recipient's replayed entries go without pacing from now on. */
  readonly unpace: (rec: Recipient) => void
}) => {
  const { log, held, now, admit, scheduleHead, unpace } = q
  /**
   * Requeues dead entries in the log, overlapping the calls (they share group commits), then schedules
   * the ones that succeeded, in seq order, so a recipient's older entry never starts after a newer one.
   * Fails with the first error after scheduling what did succeed.
   */
  const requeue = (dead: ReadonlyArray<DeliveryEntry>): Effect.Effect<number, DeliveryLogError> =>
    Effect.gen(function*() {
      const exits = yield* Effect.forEach(
        dead,
        (entry) => Effect.exit(Effect.flatMap(log.requeue(entry.id), () => log.get(entry.id))),
        { concurrency: 64 }
      )
      let count = 0
      let failure: Cause.Cause<DeliveryLogError> | undefined
      for (let i = 0; i < dead.length; i++) {
        const exit = exits[i]
        if (Exit.isFailure(exit)) {
          failure ??= exit.cause
          continue
        }
        count++
        const fresh = exit.value
        yield* admit(
          Option.isSome(fresh) && fresh.value.status === "pending"
            ? fresh.value
            : { ...dead[i], status: "pending", attempts: 0 }
        )
      }
      return failure === undefined ? count : yield* Effect.failCause(failure)
    })

  const retryDead = (id?: string): Effect.Effect<number, DeliveryLogError> =>
    id === undefined
      ? Effect.flatMap(log.dead, (dead) => requeue([...dead].sort((a, b) => a.seq - b.seq)))
      : Effect.gen(function*() {
        const found = yield* log.get(id)
        if (Option.isNone(found)) {
          return yield* new DeliveryLogError({
            reason: "unknown-id",
            message: `Expected \`id\` to name an entry of the log, got \`${id}\``
          })
        }
        return found.value.status === "dead" ? yield* requeue([found.value]) : 0
      })

  const retryNow = (filter: { readonly channel?: string; readonly to?: string } = {}): Effect.Effect<number> =>
    Effect.suspend(() => {
      const channel = filter?.channel
      const to = filter?.to
      const at = now()
      let count = 0
      const matched: Array<Recipient> = []
      for (const rec of held.byKey.values()) {
        const m = rec.head?.entry.message
        if (m === undefined || (channel !== undefined && m.channel !== channel) || (to !== undefined && m.to !== to)) {
          continue
        }
        for (let n = rec.head; n !== undefined; n = n.next) {
          if (n.inFlight || n.op !== undefined) continue
          count++
          if (n.entry.nextAttemptAt !== undefined && n.entry.nextAttemptAt > at) {
            n.entry = { ...n.entry, nextAttemptAt: at }
          }
        }
        unpace(rec)
        matched.push(rec)
      }
      return Effect.as(Effect.forEach(matched, scheduleHead, { discard: true }), count)
    })

  return { retryDead, retryNow }
}
