/**
 * A timer for any delay: Node runs a `setTimeout` over 2^31−1 ms after 1 ms (with a
 * TimeoutOverflowWarning), so a longer delay is chained from timers of at most that length.
 * Internal to `src/queue`.
 */

/** The longest delay `setTimeout` keeps (about 24.8 days). */
export const MAX_TIMER_MS = 2 ** 31 - 1

/** A pending long timer; `clear()` stops it (idempotent). */
export interface LongTimer {
  clear(): void
}

/** What the timer schedules with (the global timers; a test can hand its own). */
export interface TimerHost {
  readonly set: (f: () => void, ms: number) => unknown
  readonly clear: (handle: unknown) => void
}

const globalHost: TimerHost = {
  set: (f, ms) => setTimeout(f, ms),
  clear: (h) => clearTimeout(h as ReturnType<typeof setTimeout>)
}

/** Calls `f` once `ms` have passed, in steps of at most `MAX_TIMER_MS`. `Infinity` never fires. */
export const setLongTimeout = (f: () => void, ms: number, host: TimerHost = globalHost): LongTimer => {
  let left = ms
  let handle: unknown
  let cleared = false
  const step = (): void => {
    if (cleared) return
    if (left <= MAX_TIMER_MS) {
      handle = host.set(f, left)
      return
    }
    left -= MAX_TIMER_MS
    handle = host.set(step, MAX_TIMER_MS)
  }
  step()
  return {
    clear: () => {
      cleared = true
      host.clear(handle)
    }
  }
}
