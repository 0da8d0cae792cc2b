/** Shared fixtures of the Promise-API tests: gated tasks, flushing, queues drained after each test. */
import { vi } from "vitest"
import { createCommandQueue } from "../../src/queue/index.js"
import type { AsyncCommandQueue } from "../../src/queue/index.js"

/** A promise with its resolver, to gate tasks deterministically. */
export const gate = <A = void>() => {
  let resolve!: (a: A) => void
  let reject!: (e: unknown) => void
  const promise = new Promise<A>((res, rej) => {
    resolve = res
    reject = rej
  })
  return { promise, resolve, reject }
}

/** A task that says when it started, then waits for `release`; records its AbortSignal. */
export const gated = <A>(value: A) => {
  const started = gate()
  const release = gate()
  let signal: AbortSignal | undefined
  return {
    task: async (s: AbortSignal) => {
      signal = s
      started.resolve()
      await release.promise
      return value
    },
    started: started.promise,
    release: () => release.resolve(),
    signal: () => signal!
  }
}

/** Lets queued Effect work (setImmediate) and promise reactions run. */
export const flush = async (rounds = 5) => {
  for (let i = 0; i < rounds; i++) await new Promise((r) => setImmediate(r))
}

const queues: Array<AsyncCommandQueue> = []
export const make = async (options?: Parameters<typeof createCommandQueue>[0]) => {
  const q = await createCommandQueue(options)
  queues.push(q)
  return q
}

/** Drains (deadline 0) every queue made by `make`; call it in `afterEach`. */
export const cleanUp = async () => {
  vi.useRealTimers()
  for (const q of queues.splice(0)) await q.drain({ timeoutMs: 0 })
}
