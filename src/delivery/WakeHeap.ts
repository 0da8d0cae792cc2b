/**
 * WakeHeap — a binary min-heap of `(at, value)` wake-ups, earliest first. Internal to the delivery
 * queue: one timer fiber sleeps until the earliest wake instead of one sleeping fiber per recipient.
 * push and pop are O(log n); stale entries are skipped by `makeTimer`.
 */
import { Deferred, Effect } from "effect"

/** One scheduled wake: `value` is due at `at` (epoch ms). */
export interface Wake<A> {
  readonly at: number
  readonly value: A
}

/** A min-heap of wakes ordered by `at`. */
export class WakeHeap<A> {
  private readonly items: Array<Wake<A>> = []

  get size(): number {
    return this.items.length
  }

  /** The earliest wake, left in place. */
  peek(): Wake<A> | undefined {
    return this.items[0]
  }

  push(at: number, value: A): void {
    const items = this.items
    const wake: Wake<A> = { at, value }
    items.push(wake)
    let i = items.length - 1
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (items[parent].at <= at) break
      items[i] = items[parent]
      i = parent
    }
    items[i] = wake
  }

  /** Removes and returns the earliest wake. */
  pop(): Wake<A> | undefined {
    const items = this.items
    const top = items[0]
    const last = items.pop()
    if (items.length > 0 && last !== undefined) {
      const n = items.length
      let i = 0
      for (;;) {
        const l = 2 * i + 1
        if (l >= n) break
        const r = l + 1
        const c = r < n && items[r].at < items[l].at ? r : l
        if (items[c].at >= last.at) break
        items[i] = items[c]
        i = c
      }
      items[i] = last
    }
    return top
  }
}

/** Something the timer wakes; `wakeAt` is the time of its one live wake (earlier ones supersede later ones). */
export interface Wakeable {
  wakeAt: number | undefined
}

/** A single timer over a {@link WakeHeap}: `schedule` a wake, `run` the fiber that fires them. */
export interface Timer<A extends Wakeable> {
  /** Wakes `value` at `at` unless it already has a wake at or before `at`. */
  readonly schedule: (value: A, at: number) => void
  /** A wake is due now and has not fired yet. */
  readonly hasDue: () => boolean
  /** Fires due wakes (`onDue`, then `afterPass` once per pass) and sleeps on the Effect `Clock` until the next. Never ends. */
  readonly run: Effect.Effect<never>
}

/** Makes a {@link Timer}: one fiber sleeping until the earliest wake, re-armed when an earlier one is scheduled. */
export const makeTimer = <A extends Wakeable>(
  now: () => number,
  onDue: (value: A) => Effect.Effect<void>,
  afterPass: () => void
): Timer<A> => {
  const heap = new WakeHeap<A>()
  let signal = Deferred.makeUnsafe<void>()
  let target = Infinity
  const schedule = (value: A, at: number) => {
    if (value.wakeAt !== undefined && value.wakeAt <= at) return
    value.wakeAt = at
    heap.push(at, value)
    if (at < target) Deferred.doneUnsafe(signal, Effect.void)
  }
  const run = Effect.gen(function*() {
    for (;;) {
      const t = now()
      while (heap.size > 0 && heap.peek()!.at <= t) {
        const { at, value } = heap.pop()!
        if (value.wakeAt !== at) continue // superseded by an earlier wake
        value.wakeAt = undefined
        yield* onDue(value)
      }
      afterPass()
      signal = Deferred.makeUnsafe<void>()
      const next = heap.peek()
      target = next === undefined ? Infinity : next.at
      yield* next === undefined
        ? Deferred.await(signal)
        : Effect.raceFirst(Effect.sleep(target - t), Deferred.await(signal))
    }
  })
  return { schedule, hasDue: () => heap.size > 0 && heap.peek()!.at <= now(), run }
}
