import { describe, expect, it } from "vitest"
import { MAX_TIMER_MS, setLongTimeout, type TimerHost } from "../../src/queue/longTimer.js"

/** A host that records each delay asked for and runs a timer only when told. */
const recordingHost = () => {
  const delays: Array<number> = []
  const due: Array<{ f: () => void; cleared: boolean }> = []
  const host: TimerHost = {
    set: (f, ms) => {
      delays.push(ms)
      const t = { f, cleared: false }
      due.push(t)
      return t
    },
    clear: (h) => {
      ;(h as { cleared: boolean }).cleared = true
    }
  }
  const fireNext = () => {
    const t = due.shift()!
    if (!t.cleared) t.f()
  }
  return { host, delays, fireNext, pending: () => due.filter((t) => !t.cleared).length }
}

describe("setLongTimeout", () => {
  it("a delay up to 2^31-1 ms is one timer of that delay", () => {
    const r = recordingHost()
    let fired = 0
    setLongTimeout(() => fired++, MAX_TIMER_MS, r.host)
    expect(r.delays).toEqual([MAX_TIMER_MS])
    r.fireNext()
    expect(fired).toBe(1)
  })

  it("a longer delay is chained from timers of at most 2^31-1 ms that add up to it", () => {
    const r = recordingHost()
    let fired = 0
    const ms = 2 * MAX_TIMER_MS + 123
    setLongTimeout(() => fired++, ms, r.host)
    r.fireNext()
    r.fireNext()
    expect(fired).toBe(0)
    r.fireNext()
    expect(fired).toBe(1)
    expect(r.delays).toEqual([MAX_TIMER_MS, MAX_TIMER_MS, 123])
    expect(r.delays.reduce((a, b) => a + b, 0)).toBe(ms)
  })

  it("clear() between links stops the chain", () => {
    const r = recordingHost()
    let fired = 0
    const t = setLongTimeout(() => fired++, 3 * MAX_TIMER_MS, r.host)
    r.fireNext()
    t.clear()
    expect(r.pending()).toBe(0)
    expect(fired).toBe(0)
  })
})
