/**
 * Paces the first attempts of replayed entries (`replay: { maxPerSecond, maxRecoveryMs }`). Internal to
 * the delivery queue. Each second from the queue's start (on the Effect `Clock`) hands out
 * `maxPerSecond` starts, to recipients in the order they asked; a recipient that must wait is woken
 * when its turn comes (one per grant, no thundering herd). Once `maxRecoveryMs` has passed since the
 * start, replay starts no more old entries: `admit` says "stop" and the waiting recipients are let go.
 */
import { Deferred, Effect } from "effect"

/** Whether a recipient may start its replayed head now. */
export type Gate = "go" | "wait" | "stop"

export interface Pacer<R> {
  /** "go" (a start is taken), "wait" (queued; `wake` is called when its turn comes), "stop" (recovery is over). */
  readonly admit: (rec: R) => Gate
  /** Drops `rec` from the queue and its grant (its replayed entries go without pacing now). */
  readonly forget: (rec: R) => void
  /** Hands out starts each second and ends recovery; never ends. */
  readonly run: Effect.Effect<never>
}

export const makePacer = <R>(options: {
  readonly now: () => number
  readonly startAt: number
  readonly perSecond: number
  readonly maxRecoveryMs: number
  readonly wake: (rec: R) => Effect.Effect<void>
}): Pacer<R> => {
  const { now, startAt, perSecond, maxRecoveryMs, wake } = options
  const endAt = startAt + maxRecoveryMs
  const queue: Array<R> = []
  let head = 0
  const queued = new Set<R>()
  const granted = new Set<R>()
  let window = 0
  let used = 0
  let signal = Deferred.makeUnsafe<void>()

  const roll = (t: number) => {
    const w = Math.floor((t - startAt) / 1000)
    if (w !== window) {
      window = w
      used = 0
    }
  }

  const admit = (rec: R): Gate => {
    const t = now()
    if (t >= endAt) return "stop"
    if (granted.delete(rec)) return "go"
    roll(t)
    if (used < perSecond && head === queue.length) {
      used++
      return "go"
    }
    if (!queued.has(rec)) {
      queued.add(rec)
      queue.push(rec)
      if (queue.length - head === 1) Deferred.doneUnsafe(signal, Effect.void)
    }
    return "wait"
  }

  const forget = (rec: R) => {
    granted.delete(rec)
    queued.delete(rec) // left in `queue`; skipped when popped
  }

  const run = Effect.gen(function*() {
    for (;;) {
      const t = now()
      if (t >= endAt) {
        // Recovery is over: nobody waits for a start any more (admit says "stop" from now on).
        queue.length = head = 0
        queued.clear()
        granted.clear()
        return yield* Effect.never
      }
      roll(t)
      while (used < perSecond && head < queue.length) {
        const rec = queue[head++]!
        if (!queued.delete(rec)) continue
        used++
        granted.add(rec)
        yield* wake(rec)
      }
      if (head === queue.length) queue.length = head = 0
      signal = Deferred.makeUnsafe<void>()
      const next = queue.length === 0 ? endAt : Math.min(startAt + (window + 1) * 1000, endAt)
      yield* queue.length === 0 && endAt === Infinity
        ? Deferred.await(signal)
        : Effect.raceFirst(Effect.sleep(Math.max(0, next - t)), Deferred.await(signal))
    }
  })

  return { admit, forget, run }
}
