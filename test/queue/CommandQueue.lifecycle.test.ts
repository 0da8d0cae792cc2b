import { assert, describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Option, Scope } from "effect"
import { TestClock } from "effect/testing"
import { engineOf } from "../../src/queue/engine/Engine.js"
import { AdmissionError, CommandQueue, QueueFailure, RequestError } from "../../src/queue/index.js"
import { gated, makeQueue } from "./CommandQueue.helpers.js"

const lane = (queue: CommandQueue.CommandQueue, name: string) =>
  Effect.map(queue.snapshot, (all) => all.find((l) => l.lane === name)!)

describe("CommandQueue generations", () => {
  it.effect("restartLane fails waiting tasks stale and they never run (at once, before the running ones ended)", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 8 } } })
      const g = yield* gated("old")
      const running = yield* queue.dispatch("main", "a", g.task)
      yield* g.started
      let ran = 0
      const waiting = [
        yield* queue.dispatch("main", "a", Effect.sync(() => ran++)),
        yield* queue.dispatch("main", "b", Effect.sync(() => ran++))
      ]
      const restart = yield* Effect.forkChild(queue.restartLane("main"))
      // the waiting ones fail at once, before the running one has ended
      for (const f of waiting) {
        expect(yield* Effect.flip(f.await)).toMatchObject({ _tag: "QueueFailure", reason: "stale", stage: "queued" })
      }
      expect(yield* Effect.flip(running.await)).toMatchObject({ reason: "stale", stage: "running" })
      expect(yield* Fiber.join(restart)).toBe(1)
      expect(ran).toBe(0)
    }))

  it.effect("restartLane interrupts running tasks and returns after their finalizers", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const events: Array<string> = []
      const gates = [yield* gated(1), yield* gated(2)]
      const futures = []
      for (const [i, g] of gates.entries()) {
        futures.push(
          yield* queue.dispatch(
            "main",
            `k${i}`,
            Effect.andThen(g.task, Effect.never).pipe(
              Effect.ensuring(Effect.sync(() => events.push(`task ${i} finalizers`)))
            ),
            {
              finalizer: () =>
                Effect.andThen(
                  Effect.yieldNow,
                  Effect.sync(() => events.push(`finalizer ${i}`))
                )
            }
          )
        )
      }
      for (const g of gates) yield* g.started
      const generation = yield* queue.restartLane("main")
      expect(generation).toBe(1)
      expect(events.sort()).toEqual(["finalizer 0", "finalizer 1", "task 0 finalizers", "task 1 finalizers"])
      for (const f of futures) {
        const error = yield* Effect.flip(f.await)
        expect(error).toBeInstanceOf(QueueFailure)
        expect(error).toMatchObject({ reason: "stale", stage: "running" })
      }
      expect(yield* lane(queue, "main")).toMatchObject({ generation: 1, running: 0, waiting: 0, keys: 0 })
    }))

  it.effect("a stale task cannot start after restartLane returns, and the lane keeps working in the new generation", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 100 } } })
      const g = yield* gated("blocker")
      yield* queue.dispatch("main", "k", g.task)
      yield* g.started
      let started = 0
      const stale = []
      for (let i = 0; i < 50; i++) stale.push(yield* queue.dispatch("main", `k${i % 5}`, Effect.sync(() => started++)))
      expect(stale.every((f) => f.generation === 0)).toBe(true)
      expect(yield* queue.restartLane("main")).toBe(1)
      expect(started).toBe(0)
      for (const f of stale) expect(Option.isSome(yield* f.poll)).toBe(true)
      const fresh = yield* queue.dispatch("main", "k", Effect.succeed("new"))
      expect(fresh.generation).toBe(1)
      expect(yield* fresh.await).toBe("new")
      yield* Effect.yieldNow
      expect(started).toBe(0)
      expect(yield* queue.generation("main")).toBe(1)
    }))

  it.effect("restartLane touches only its lane; restartAll restarts every lane; generation reads it", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const g = yield* gated("beat")
      const beat = yield* queue.dispatch("heartbeat", "beat", g.task)
      yield* g.started
      yield* queue.restartLane("main")
      expect(yield* queue.generation("main")).toBe(1)
      expect(yield* queue.generation("heartbeat")).toBe(0)
      expect(yield* beat.poll).toEqual(Option.none())
      yield* queue.restartAll
      expect(yield* Effect.flip(beat.await)).toMatchObject({ reason: "stale", participation: "background" })
      expect((yield* queue.snapshot).map((l) => l.generation)).toEqual([2, 1, 1])
      expect(yield* Effect.flip(queue.restartLane("nope"))).toBeInstanceOf(RequestError)
      expect(yield* Effect.flip(queue.generation("nope"))).toBeInstanceOf(RequestError)
    }))

  it.effect("a task that ended before restartLane keeps its outcome", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const f = yield* queue.dispatch("main", "k", Effect.succeed(1))
      expect(yield* f.await).toBe(1)
      yield* queue.restartLane("main")
      expect(yield* f.await).toBe(1)
    }))
})

describe("CommandQueue drain", () => {
  it.effect("drain closes admission at once: later dispatches fail AdmissionError closed", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const g = yield* gated(1)
      const admitted = yield* queue.dispatch("main", "k", g.task)
      const drain = yield* Effect.forkChild(queue.drain())
      yield* Effect.yieldNow
      const refused = yield* Effect.flip(queue.dispatch("main", "k2", Effect.void))
      expect(refused).toBeInstanceOf(AdmissionError)
      expect(refused).toMatchObject({ reason: "closed", lane: "main", key: "k2" })
      expect((yield* queue.snapshot).every((l) => l.draining)).toBe(true)
      yield* g.release
      expect(yield* admitted.await).toBe(1)
      expect(yield* Fiber.join(drain)).toEqual({ completed: 1, canceled: 0, timedOut: false })
    }))

  it.effect("drain lets admitted work finish then fails the rest closed (waiting tasks start as slots free until the deadline)", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 8 } } })
      const quick = yield* gated("quick")
      const f1 = yield* queue.dispatch("main", "a", quick.task)
      const f2 = yield* queue.dispatch("main", "b", Effect.succeed("waited and ran"))
      const stuck = yield* gated("stuck")
      const f3 = yield* queue.dispatch("main", "c", Effect.andThen(stuck.task, Effect.never))
      const f4 = yield* queue.dispatch("main", "d", Effect.succeed("never ran"))
      yield* quick.started
      const drain = yield* Effect.forkChild(queue.drain({ timeoutMs: 1_000 }))
      yield* Effect.yieldNow
      yield* quick.release
      expect(yield* f1.await).toBe("quick")
      expect(yield* f2.await).toBe("waited and ran")
      yield* stuck.started
      yield* TestClock.adjust(1_000)
      const report = yield* Fiber.join(drain)
      expect(report).toEqual({ completed: 2, canceled: 2, timedOut: true })
      expect(yield* Effect.flip(f3.await)).toMatchObject({ reason: "closed", stage: "running" })
      expect(yield* Effect.flip(f4.await)).toMatchObject({ reason: "closed", stage: "queued" })
      expect(yield* lane(queue, "main")).toMatchObject({ running: 0, waiting: 0, keys: 0, draining: true })
    }))

  it.effect("a second drain waits for the first and gets its report", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const g = yield* gated(1)
      yield* queue.dispatch("main", "k", g.task)
      const first = yield* Effect.forkChild(queue.drain())
      const second = yield* Effect.forkChild(queue.drain({ timeoutMs: 1 }))
      yield* TestClock.adjust(1)
      expect(yield* second.pipe(Fiber.await, Effect.map(Option.some), Effect.timeoutOption(0))).toEqual(Option.none())
      yield* g.release
      const a = yield* Fiber.join(first)
      const b = yield* Fiber.join(second)
      expect(a).toEqual({ completed: 1, canceled: 0, timedOut: false })
      expect(b).toBe(a)
    }))

  it.effect("closing the Scope of make drains: nothing is left running and every future is settled", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const queue = yield* Scope.provide(scope)(CommandQueue.make({ drainTimeoutMs: 5_000 }))
      const g = yield* gated("done")
      const done = yield* queue.dispatch("main", "a", g.task)
      const stuck = yield* gated("stuck")
      const never = yield* queue.dispatch("main", "b", Effect.andThen(stuck.task, Effect.never))
      yield* g.started
      yield* stuck.started
      const closing = yield* Effect.forkChild(Scope.close(scope, Exit.void))
      yield* g.release
      expect(yield* done.await).toBe("done")
      yield* TestClock.adjust(5_000)
      yield* Fiber.join(closing)
      expect(yield* Effect.flip(never.await)).toMatchObject({ reason: "closed", stage: "running" })
      expect(yield* Effect.flip(queue.dispatch("main", "c", Effect.void))).toMatchObject({ reason: "closed" })
    }))

  it.effect("drain of an idle queue returns at once with an empty report", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      expect(yield* queue.drain()).toEqual({ completed: 0, canceled: 0, timedOut: false })
    }))
})

describe("CommandQueue idle keys hold no memory", () => {
  it.effect("after a million distinct keys have come and gone, every lane's keys is 0", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({
        lanes: {
          main: { concurrent: 64, queued: 10_000 },
          heartbeat: { concurrent: 1, queued: 10_000 },
          cron: { concurrent: 2, queued: 10_000 }
        }
      })
      const names = ["main", "heartbeat", "cron"]
      const batch = 5_000
      for (let n = 0; n < 1_000_000; n += batch) {
        const futures = []
        for (let i = n; i < n + batch; i++) futures.push(yield* queue.dispatch(names[i % 3]!, `key-${i}`, Effect.void))
        for (const f of futures) yield* f.await
      }
      yield* Effect.yieldNow
      for (const l of yield* queue.snapshot) expect(l).toMatchObject({ running: 0, waiting: 0, keys: 0 })
      for (const l of engineOf(queue).all) expect(yield* l.lanes.stats).toEqual({ running: 0, waiting: 0, keys: 0 })
    }), { timeout: 60_000 })

  it.effect("keys whose tasks timed out while the lane was blocked leave nothing behind, in the queue or in its lanes", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 100, queueTimeoutMs: 10 } } })
      const g = yield* gated("blocker")
      yield* queue.dispatch("main", "blocker", g.task)
      yield* g.started
      for (let round = 0; round < 5; round++) {
        const futures = []
        for (let i = 0; i < 100; i++) futures.push(yield* queue.dispatch("main", `k-${round}-${i}`, Effect.void))
        yield* TestClock.adjust(10)
        for (const f of futures) expect(yield* Effect.flip(f.await)).toMatchObject({ reason: "timeout" })
      }
      // the ghost clean-up runs in fibers of its own; let them finish
      for (let i = 0; i < 5; i++) yield* Effect.yieldNow
      expect(yield* lane(queue, "main")).toMatchObject({ running: 1, waiting: 0, keys: 1 })
      expect(yield* engineOf(queue).byName.get("main")!.lanes.stats).toEqual({ running: 1, waiting: 0, keys: 1 })
      yield* g.release
    }))
})

describe("CommandQueue storms", () => {
  it.effect(
    "every future settles: a seeded storm of dispatches, cancels, timeouts and restarts leaves nothing pending",
    () =>
      Effect.gen(function*() {
        let seed = 42
        const random = () => {
          seed = (seed * 1_103_515_245 + 12_345) & 0x7fffffff
          return seed / 0x7fffffff
        }
        const queue = yield* makeQueue({
          lanes: {
            main: { concurrent: 3, queued: 40, queueTimeoutMs: 50 },
            cron: { concurrent: 2, queued: 20, turnTimeoutMs: 30 }
          }
        })
        const futures: Array<CommandQueue.Future<unknown, unknown>> = []
        const running = new Map<string, number>()
        let overlap = false
        const task = (lane: string, key: string) =>
          Effect.gen(function*() {
            const id = `${lane}/${key}`
            if (running.get(id)) overlap = true
            running.set(id, 1)
            yield* Effect.sleep(Math.floor(random() * 40))
            running.set(id, 0)
            if (random() < 0.1) return yield* Effect.fail("own failure")
            return "ok"
          }).pipe(Effect.onInterrupt(() => Effect.sync(() => running.set(`${lane}/${key}`, 0))))
        for (let step = 0; step < 3_000; step++) {
          const r = random()
          const laneName = r < 0.6 ? "main" : "cron"
          const key = `k${Math.floor(random() * 20)}`
          if (r < 0.85) {
            const f = yield* Effect.result(
              queue.dispatch(laneName, key, task(laneName, key), { coalesce: random() < 0.2 })
            )
            if (f._tag === "Success") futures.push(f.success)
          } else if (r < 0.92 && futures.length > 0) {
            yield* Effect.forkChild(futures[Math.floor(random() * futures.length)]!.cancel)
          } else if (r < 0.95) {
            yield* Effect.forkChild(queue.restartLane(laneName))
          } else if (r < 0.97) {
            yield* Effect.forkChild(queue.cancel(laneName, key))
          } else {
            yield* TestClock.adjust(Math.floor(random() * 20))
          }
        }
        for (let i = 0; i < 200; i++) yield* TestClock.adjust(10)
        for (const f of futures) {
          const polled = yield* f.poll
          assert(Option.isSome(polled), `future ${f.runId} is still pending`)
          const exit = polled.value
          if (Exit.isFailure(exit)) {
            const error = Cause.squash(exit.cause)
            expect(error === "own failure" || error instanceof QueueFailure).toBe(true)
          }
        }
        expect(overlap).toBe(false)
        for (const l of yield* queue.snapshot) expect(l).toMatchObject({ running: 0, waiting: 0, keys: 0 })
      }),
    { timeout: 30_000 }
  )
})

void Deferred
