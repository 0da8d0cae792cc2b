/**
 * Model-based property test of createLanes: random sequences of wake / cancel / finish / close
 * across a dozen keys and random maxConcurrent / maxQueued, run against a plain reference model
 * of shared/spec/lanes.md. After every step the real lanes are let run until every running
 * activation is parked at its gate, then compared with the model.
 * 1,000 runs by default (~0.5 s); `LANES_PROPERTY_RUNS=20000 npx vitest run test/queue/Lanes.property`
 * for a longer search (20,000 runs passed on 2026-11-30, ~7 s).
 */
import { Deferred, Effect } from "effect"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { type ActivationExit, createLanes, type LanesOptions } from "../../src/queue/index.js"
import { createLanesInternal } from "../../src/queue/lanes/scheduler.js"

type Command =
  | { readonly op: "wake"; readonly key: number }
  | { readonly op: "cancel"; readonly key: number }
  | { readonly op: "finish"; readonly key: number }
  | { readonly op: "close" }

interface Config {
  readonly maxConcurrent: number
  readonly maxQueued: number | undefined
}

type Outcome = "started" | "queued" | "coalesced" | "LaneQueueFull" | "LanesClosed"

/** The spec's state machine, as plainly as possible (arrays, no cleverness). */
class Model {
  readonly keys = new Map<number, { state: "queued" | "running"; owed: boolean }>()
  readonly queue: Array<number> = []
  readonly running = new Set<number>()
  closed = false
  /** Expected reports: "<key>:ok" for a finished activation, "<key>:int" for one cut short, "<key>:drop" for a dropped entry. */
  readonly reports = new Map<string, number>()
  constructor(readonly config: Config) {}

  private report(key: number, kind: "ok" | "int" | "drop") {
    const id = `${key}:${kind}`
    this.reports.set(id, (this.reports.get(id) ?? 0) + 1)
  }
  waiting(): number {
    let owed = 0
    for (const k of this.running) if (this.keys.get(k)!.owed) owed++
    return this.queue.length + owed
  }
  private full(): boolean {
    return this.config.maxQueued !== undefined && this.waiting() >= this.config.maxQueued
  }
  private drain() {
    while (this.running.size < this.config.maxConcurrent && this.queue.length > 0) {
      const k = this.queue.shift()!
      this.keys.get(k)!.state = "running"
      this.running.add(k)
    }
  }
  wake(key: number): Outcome {
    if (this.closed) return "LanesClosed"
    const e = this.keys.get(key)
    if (e === undefined) {
      if (this.running.size < this.config.maxConcurrent && this.queue.length === 0) {
        this.keys.set(key, { state: "running", owed: false })
        this.running.add(key)
        return "started"
      }
      if (this.full()) return "LaneQueueFull"
      this.keys.set(key, { state: "queued", owed: false })
      this.queue.push(key)
      return "queued"
    }
    if (e.state === "queued" || e.owed) return "coalesced"
    if (this.full()) return "LaneQueueFull"
    e.owed = true
    return "queued"
  }
  /** The running activation of `key` ends (by itself, or cut short); its follow-up joins the tail. */
  private end(key: number, kind: "ok" | "int") {
    const e = this.keys.get(key)!
    this.report(key, kind)
    this.running.delete(key)
    if (e.owed) {
      e.owed = false
      e.state = "queued"
      this.queue.push(key)
    } else {
      this.keys.delete(key)
    }
    this.drain()
  }
  finish(key: number) {
    if (this.running.has(key)) this.end(key, "ok")
  }
  cancel(key: number) {
    const e = this.keys.get(key)
    if (e === undefined) return
    if (e.state === "queued") {
      this.queue.splice(this.queue.indexOf(key), 1)
      this.keys.delete(key)
      this.report(key, "drop")
      return
    }
    if (e.owed) {
      e.owed = false
      this.report(key, "drop")
    }
    this.end(key, "int")
  }
  close() {
    if (this.closed) return
    this.closed = true
    for (const k of this.queue) {
      this.keys.delete(k)
      this.report(k, "drop")
    }
    this.queue.length = 0
    for (const k of [...this.running]) {
      const e = this.keys.get(k)!
      if (e.owed) {
        e.owed = false
        this.report(k, "drop")
      }
      this.end(k, "int")
    }
  }
}

const kindOf = (exit: ActivationExit<number, never>): string =>
  exit._tag === "ActivationSucceeded" ? "ok" : exit._tag === "ActivationInterrupted" && !exit.started ? "drop" : "int"

/**
 * How the lanes under test are made: `createLanes` with the model's numbers as keys, or (`alone`)
 * lanes that queue a string key alone, without an entry, behind a single waiting key (`aloneFrom: 1`;
 * by default past 8,192: `waiting.ts`), the model's key `n` as `k<n>`.
 */
const makeLanes = (alone: boolean, options: LanesOptions<number>) => {
  if (!alone) return createLanes<number>(options)
  const toNumber = (key: string) => Number(key.slice(1))
  return Effect.map(
    createLanesInternal<string>({
      ...options,
      activate: (key) => options.activate(toNumber(key)),
      onExit: (exit) => options.onExit!({ ...exit, key: toNumber(exit.key) } as ActivationExit<number, never>)
    }, { aloneFrom: 1 }),
    (lanes) => ({
      wake: (key: number) => lanes.wake(`k${key}`),
      cancel: (key: number) => lanes.cancel(`k${key}`),
      close: lanes.close,
      stats: lanes.stats
    })
  )
}

const run = (config: Config, commands: ReadonlyArray<Command>, alone = false) =>
  Effect.gen(function*() {
    const model = new Model(config)
    const violations: Array<string> = []
    const gates = new Map<number, Deferred.Deferred<void>>()
    const live = new Set<number>() // activations started and not yet reported
    const reports = new Map<string, number>()
    const unserved = new Map<number, Array<number>>() // accepted wakes not yet served, by key
    const lastStart = new Map<number, number>() // seq of the latest activation start, by key
    let seq = 0

    const lanes = yield* makeLanes(alone, {
      maxConcurrent: config.maxConcurrent,
      ...(config.maxQueued === undefined ? {} : { maxQueued: config.maxQueued }),
      // activate is called when the activation gets its slot; its Effect runs in the activation's fiber
      activate: (key) => {
        lastStart.set(key, ++seq)
        if (live.has(key)) violations.push(`two activations of key ${key} at once`)
        live.add(key)
        if (live.size > config.maxConcurrent) violations.push(`${live.size} activations at once`)
        for (const s of unserved.get(key) ?? []) if (s >= seq) violations.push(`wake ${s} served by an earlier start`)
        unserved.delete(key) // every wake that arrived before this start is served by it
        return Effect.suspend(() => {
          const gate = Deferred.makeUnsafe<void>()
          gates.set(key, gate)
          return Deferred.await(gate)
        })
      },
      onExit: (exit) =>
        Effect.sync(() => {
          const kind = kindOf(exit)
          if (kind !== "drop") {
            if (!live.delete(exit.key)) violations.push(`exit of key ${exit.key} that was not running`)
            gates.delete(exit.key)
          }
          const id = `${exit.key}:${kind}`
          reports.set(id, (reports.get(id) ?? 0) + 1)
        })
    })

    /** Lets the lanes run until each running activation is parked at its gate (bounded, never a sleep). */
    const settle = Effect.gen(function*() {
      for (let turn = 0; turn < 1_000; turn++) {
        const s = yield* lanes.stats
        if (s.running === gates.size && s.running === live.size) return s
        yield* Effect.yieldNow
      }
      return yield* Effect.die("the lanes did not settle")
    })

    const check = (step: string) =>
      Effect.gen(function*() {
        const s = yield* settle
        expect(violations, step).toEqual([])
        expect(s, step).toEqual({ running: model.running.size, waiting: model.waiting(), keys: model.keys.size })
        expect([...gates.keys()].sort(), step).toEqual([...model.running].sort())
        if (config.maxQueued !== undefined) expect(s.waiting, step).toBeLessThanOrEqual(config.maxQueued)
        expect(new Map([...reports].sort()), step).toEqual(new Map([...model.reports].sort()))
        for (const key of unserved.keys()) {
          // a wake not yet served must still be owed: queued, or a follow-up of a running key
          const e = model.keys.get(key)
          expect(e !== undefined && (e.state === "queued" || e.owed), `${step}: wake of ${key} lost`).toBe(true)
        }
      })

    for (const [i, c] of commands.entries()) {
      const step = `step ${i} ${JSON.stringify(c)}`
      if (c.op === "wake") {
        const expected = model.wake(c.key)
        const wakeSeq = ++seq
        const actual: Outcome = yield* lanes.wake(c.key).pipe(Effect.catch((e) => Effect.succeed(e._tag)))
        expect(actual, step).toBe(expected)
        if (actual === "started") {
          expect(lastStart.get(c.key), `${step}: started, yet no activation started after the wake`).toBeGreaterThan(
            wakeSeq
          )
        } else if (actual === "queued" || actual === "coalesced") {
          unserved.set(c.key, [...(unserved.get(c.key) ?? []), wakeSeq])
        }
      } else if (c.op === "finish") {
        model.finish(c.key)
        const gate = gates.get(c.key)
        if (gate !== undefined) {
          gates.delete(c.key)
          yield* Deferred.succeed(gate, undefined)
        }
      } else if (c.op === "cancel") {
        model.cancel(c.key)
        unserved.delete(c.key)
        yield* lanes.cancel(c.key)
      } else {
        model.close()
        unserved.clear()
        yield* lanes.close
      }
      yield* check(step)
    }
    model.close()
    unserved.clear() // close drops what is owed
    yield* lanes.close
    yield* check("final close")
    expect(live.size).toBe(0)
  })

const configArb: fc.Arbitrary<Config> = fc.record({
  maxConcurrent: fc.integer({ min: 1, max: 4 }),
  maxQueued: fc.option(fc.integer({ min: 0, max: 6 }), { nil: undefined })
})

const commandsOf = (keys: number): fc.Arbitrary<ReadonlyArray<Command>> => {
  const key = fc.integer({ min: 0, max: keys - 1 })
  const commandArb: fc.Arbitrary<Command> = fc.oneof(
    { weight: 6, arbitrary: key.map((k) => ({ op: "wake" as const, key: k })) },
    { weight: 4, arbitrary: key.map((k) => ({ op: "finish" as const, key: k })) },
    { weight: 1, arbitrary: key.map((k) => ({ op: "cancel" as const, key: k })) },
    { weight: 1, arbitrary: fc.constant({ op: "close" as const }) }
  )
  return fc.array(commandArb, { minLength: 1, maxLength: 80 }).map((cs) =>
    // a close ends a sequence most of the time: keep the rest of it interesting
    cs.filter((c, i) => c.op !== "close" || i > cs.length * 0.8)
  )
}

describe("Lanes: model-based property", () => {
  it("random wake / cancel / finish / close sequences match the reference model and keep every invariant", async () => {
    await fc.assert(
      fc.asyncProperty(
        configArb,
        commandsOf(12),
        (config, commands) => Effect.runPromise(Effect.scoped(run(config, commands)))
      ),
      { numRuns: Number(process.env.LANES_PROPERTY_RUNS ?? 1_000) }
    )
  })

  it("the same with string keys queued alone (no entry) behind one waiting key, fewer keys (they come back)", async () => {
    await fc.assert(
      fc.asyncProperty(
        configArb,
        commandsOf(6),
        (config, commands) => Effect.runPromise(Effect.scoped(run(config, commands, true)))
      ),
      { numRuns: Number(process.env.LANES_PROPERTY_RUNS ?? 1_000) }
    )
  })
})
