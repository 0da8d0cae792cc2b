/** Shared fixtures of the CommandQueue tests: a queue that is drained at once when the test ends, gated tasks, captured logs. */
import type { Layer } from "effect"
import { Deferred, Effect, Logger, References } from "effect"
import { CommandQueue } from "../../src/queue/index.js"

/**
 * A queue in the test's Scope. When the test ends it is drained with a zero deadline, so a test
 * that leaves work behind ends at once instead of waiting 30 s of TestClock time.
 */
export const makeQueue = (options?: CommandQueue.CommandQueueOptions) =>
  Effect.gen(function*() {
    const queue = yield* CommandQueue.make(options)
    yield* Effect.addFinalizer(() => queue.drain({ timeoutMs: 0 }))
    return queue
  })

/** A task that says when it started and then waits for `release`. */
export const gated = <A>(value: A) =>
  Effect.gen(function*() {
    const started = yield* Deferred.make<void>()
    const gate = yield* Deferred.make<void>()
    return {
      task: Effect.andThen(Deferred.succeed(started, undefined), Effect.as(Deferred.await(gate), value)),
      started: Deferred.await(started),
      release: Deferred.succeed(gate, undefined)
    }
  })

/** A task that records its name in `log` when it runs. */
export const record = <A extends string>(log: Array<string>, name: A) =>
  Effect.sync(() => {
    log.push(name)
    return name
  })

export interface LogLine {
  readonly level: string
  readonly message: string
  readonly annotations: Readonly<Record<string, unknown>>
}

/** Collects every log line of the effect it is provided to. */
export const captureLogs = () => {
  const lines: Array<LogLine> = []
  const logger = Logger.make((options) => {
    const message = Array.isArray(options.message) ? options.message.map(String).join(" ") : String(options.message)
    lines.push({
      level: options.logLevel,
      message,
      annotations: { ...options.fiber.getRef(References.CurrentLogAnnotations) }
    })
  })
  return { lines, layer: Logger.layer([logger]) as Layer.Layer<never> }
}

/** Lets forked activations and fibers run (a few macrotasks); TestClock time does not move. */
export const flushFibers = Effect.promise(async () => {
  for (let i = 0; i < 6; i++) await new Promise((r) => setImmediate(r))
})

/**
 * Tasks that write their name into `log` when they start and then wait until released by name:
 * the order of `log` is the order the queue started them.
 */
export const starts = () => {
  const log: Array<string> = []
  const gates = new Map<string, Deferred.Deferred<void>>()
  const gateOf = (name: string) => {
    let g = gates.get(name)
    if (g === undefined) {
      g = Deferred.makeUnsafe<void>()
      gates.set(name, g)
    }
    return g
  }
  return {
    log,
    task: (name: string) =>
      Effect.suspend(() => {
        log.push(name)
        return Effect.as(Deferred.await(gateOf(name)), name)
      }),
    release: (name: string) => Deferred.succeed(gateOf(name), undefined)
  }
}
