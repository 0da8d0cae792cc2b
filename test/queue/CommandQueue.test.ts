import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Option } from "effect"
import { AdmissionError, CommandQueue, LanesConfigInvalid, RequestError } from "../../src/queue/index.js"
import { gated, makeQueue, record } from "./CommandQueue.helpers.js"

describe("CommandQueue construction", () => {
  it.effect("make has the default lanes main, heartbeat and cron with their limits", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const lanes = yield* queue.snapshot
      expect(lanes.map((l) => [l.lane, l.concurrent, l.queued, l.participation, l.generation])).toEqual([
        ["main", 4, 64, "blocking", 0],
        ["heartbeat", 1, 8, "background", 0],
        ["cron", 2, 32, "background", 0]
      ])
      for (const l of lanes) expect(l).toMatchObject({ running: 0, waiting: 0, keys: 0, draining: false })
    }))

  it.effect("lanes given are merged over the defaults and more lanes are allowed by name", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({
        lanes: {
          main: { concurrent: 2, queued: 5 },
          heartbeat: { concurrent: 1, queued: 1 },
          tools: { concurrent: 3, queued: 9 }
        }
      })
      const lanes = yield* queue.snapshot
      expect(lanes.map((l) => [l.lane, l.concurrent, l.queued, l.participation])).toEqual([
        ["main", 2, 5, "blocking"],
        ["heartbeat", 1, 1, "background"],
        ["cron", 2, 32, "background"],
        ["tools", 3, 9, "blocking"]
      ])
    }))

  const bad: ReadonlyArray<readonly [string, CommandQueue.CommandQueueOptions, string]> = [
    ["lanes.main.concurrent", { lanes: { main: { concurrent: 0, queued: 1 } } }, "got `0`"],
    ["lanes.main.concurrent", { lanes: { main: { concurrent: 1.5, queued: 1 } } }, "an integer from 1 and up"],
    ["lanes.cron.queued", { lanes: { cron: { concurrent: 1, queued: 10_001 } } }, "from 0 through 10000, got `10001`"],
    ["lanes.heartbeat.queued", { lanes: { heartbeat: { concurrent: 1, queued: -1 } } }, "got `-1`"],
    ["lanes.tools.concurrent", { lanes: { tools: { queued: 1 } } }, "got `undefined`"],
    [
      "lanes.main.turnTimeoutMs",
      { lanes: { main: { concurrent: 1, queued: 1, turnTimeoutMs: 0 } } },
      "finite number greater than 0"
    ],
    [
      "lanes.main.queueTimeoutMs",
      { lanes: { main: { concurrent: 1, queued: 1, queueTimeoutMs: Infinity } } },
      "got `Infinity`"
    ],
    ["lanes.main.warnAfterMs", { lanes: { main: { concurrent: 1, queued: 1, warnAfterMs: -5 } } }, "got `-5`"],
    ["lanes.main.finalizationTimeoutMs", {
      lanes: { main: { concurrent: 1, queued: 1, finalizationTimeoutMs: Number.NaN } }
    }, "got `NaN`"],
    [
      "lanes.main.participation",
      { lanes: { main: { concurrent: 1, queued: 1, participation: "urgent" as never } } },
      "got `\"urgent\"`"
    ],
    [
      "drainTimeoutMs",
      { drainTimeoutMs: 0 },
      "Expected `drainTimeoutMs` to be a finite number greater than 0, got `0`"
    ],
    ["auditTimeoutMs", { auditTimeoutMs: -1 }, "got `-1`"],
    ["onTaskExit", { onTaskExit: 42 as never }, "a function"]
  ]
  for (const [field, options, message] of bad) {
    it.effect(`a bad limit fails make with LanesConfigInvalid whose field is its path: ${field} (${message})`, () =>
      Effect.gen(function*() {
        const error = yield* Effect.flip(CommandQueue.make(options))
        expect(error).toBeInstanceOf(LanesConfigInvalid)
        expect(error.field).toBe(field)
        expect(error.message).toContain(message)
      }))
  }
})

describe("CommandQueue dispatch", () => {
  it.effect("dispatch returns at once (started), and the task runs with the context dispatch was called in", () =>
    Effect.gen(function*() {
      class Greeting extends Context.Service<Greeting, string>()("Greeting") {}
      const queue = yield* makeQueue()
      const { task, release } = yield* gated("unused")
      const future = yield* queue.dispatch(
        "main",
        "k",
        Effect.andThen(
          task,
          Effect.gen(function*() {
            return yield* Greeting
          })
        )
      ).pipe(
        Effect.provideService(Greeting, "hello")
      )
      expect(future.admission).toBe("started")
      expect(future).toMatchObject({ lane: "main", key: "k", generation: 0 })
      expect(future.runId).toMatch(/^run-/)
      expect(yield* future.poll).toEqual(Option.none())
      yield* release
      expect(yield* future.await).toBe("hello")
    }))

  it.effect("admission started means the task holds its slot at once: snapshot counts it running before dispatch's caller yields", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 4 } } })
      const g = yield* gated("a")
      const a = yield* queue.dispatch("main", "a", g.task)
      const b = yield* queue.dispatch("main", "b", Effect.void)
      expect([a.admission, b.admission]).toEqual(["started", "queued"])
      expect((yield* queue.snapshot)[0]).toMatchObject({ running: 1, waiting: 1, keys: 2 })
      yield* g.release
      yield* b.await
    }))

  it.effect("a task cancelled after it got its slot but before its first step never runs its body", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      let ran = false
      const f = yield* queue.dispatch("main", "k", Effect.sync(() => (ran = true)))
      expect(f.admission).toBe("started")
      yield* f.cancel
      expect(yield* Effect.flip(f.await)).toMatchObject({ reason: "canceled", stage: "running" })
      expect(ran).toBe(false)
    }))

  it.effect("runIds are unique", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const ids = new Set<string>()
      for (let i = 0; i < 50; i++) ids.add((yield* queue.dispatch("main", `k${i % 3}`, Effect.void)).runId)
      expect(ids.size).toBe(50)
    }))

  it.effect("tasks of one key run one at a time in admission order (per-key FIFO)", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const log: Array<string> = []
      let running = 0
      let most = 0
      const step = (name: string) =>
        Effect.gen(function*() {
          running++
          most = Math.max(most, running)
          yield* Effect.yieldNow
          log.push(name)
          running--
        })
      const futures = []
      for (let i = 0; i < 8; i++) futures.push(yield* queue.dispatch("main", "session", step(`t${i}`)))
      expect(futures.map((f) => f.admission)).toEqual(["started", ...Array(7).fill("queued")])
      for (const f of futures) yield* f.await
      expect(log).toEqual(["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"])
      expect(most).toBe(1)
    }))

  it.effect("keys of one lane run side by side up to concurrent", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 2, queued: 10 } } })
      const a = yield* gated("a")
      const b = yield* gated("b")
      const c = yield* gated("c")
      yield* queue.dispatch("main", "a", a.task)
      yield* queue.dispatch("main", "b", b.task)
      const fc = yield* queue.dispatch("main", "c", c.task)
      expect(fc.admission).toBe("queued")
      yield* a.started
      yield* b.started
      expect((yield* queue.snapshot)[0]).toMatchObject({ running: 2, waiting: 1, keys: 3 })
      yield* a.release
      yield* c.started
      yield* b.release
      yield* c.release
      expect(yield* fc.await).toBe("c")
    }))

  it.effect("fairness across keys: a key with more waiting tasks runs one, then waits behind the keys that queued meanwhile", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 10 } } })
      const log: Array<string> = []
      const first = yield* gated("A1")
      const a1 = yield* queue.dispatch("main", "A", Effect.tap(first.task, () => Effect.sync(() => log.push("A1"))))
      yield* first.started
      const rest = [
        yield* queue.dispatch("main", "A", record(log, "A2")),
        yield* queue.dispatch("main", "A", record(log, "A3")),
        yield* queue.dispatch("main", "B", record(log, "B1")),
        yield* queue.dispatch("main", "C", record(log, "C1"))
      ]
      yield* first.release
      yield* a1.await
      for (const f of rest) yield* f.await
      expect(log).toEqual(["A1", "B1", "C1", "A2", "A3"])
    }))

  it.effect("dispatch at the ownership bound fails AdmissionError full", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 2 } } })
      const first = yield* gated("1")
      const f1 = yield* queue.dispatch("main", "a", first.task)
      yield* queue.dispatch("main", "b", Effect.void)
      yield* queue.dispatch("main", "c", Effect.void)
      const finalized: Array<string> = []
      const error = yield* Effect.flip(queue.dispatch("main", "d", Effect.void, {
        finalizer: () => Effect.sync(() => finalized.push("d"))
      }))
      expect(error).toBeInstanceOf(AdmissionError)
      expect(error).toMatchObject({ _tag: "AdmissionError", lane: "main", key: "d", reason: "full" })
      expect(finalized).toEqual([])
      // a refusal has no runId: it never took ownership
      expect("runId" in error).toBe(false)
      yield* first.release
      yield* f1.await
      yield* queue.dispatch("main", "d", Effect.void)
    }))

  it.effect("a queued task owns its place: the bound counts tasks, also of one key", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 4, queued: 1 } } })
      const first = yield* gated("1")
      yield* queue.dispatch("main", "k", first.task)
      yield* first.started
      for (let i = 0; i < 4; i++) yield* queue.dispatch("main", "k", Effect.void)
      const error = yield* Effect.flip(queue.dispatch("main", "other", Effect.void))
      expect(error).toMatchObject({ reason: "full" })
      expect((yield* queue.snapshot)[0]).toMatchObject({ running: 1, waiting: 4, keys: 1 })
      yield* first.release
    }))

  it.effect("dispatch refuses an unknown lane, an empty key or a bad option with RequestError, and runs nothing", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      let ran = 0
      const task = Effect.sync(() => ran++)
      const unknown = yield* Effect.flip(queue.dispatch("nope", "k", task))
      expect(unknown).toBeInstanceOf(RequestError)
      expect(unknown).toMatchObject({ lane: "nope", key: "k" })
      expect(unknown.message).toBe("Expected `lane` to be one of `main`, `heartbeat`, `cron`, got `\"nope\"`")
      const empty = yield* Effect.flip(queue.dispatch("main", "", task))
      expect(empty.message).toBe("Expected `key` to be a non-empty string, got `\"\"`")
      const option = yield* Effect.flip(queue.dispatch("main", "k", task, { queueTimeoutMs: -1 }))
      expect(option).toBeInstanceOf(RequestError)
      expect(option.message).toBe("Expected `queueTimeoutMs` to be a finite number greater than 0, got `-1`")
      const turn = yield* Effect.flip(queue.dispatch("main", "k", task, { turnTimeoutMs: Number.NaN }))
      expect(turn.message).toContain("`turnTimeoutMs`")
      expect(ran).toBe(0)
      expect((yield* queue.snapshot)[0]).toMatchObject({ running: 0, waiting: 0, keys: 0 })
    }))

  it.effect("coalesce joins a waiting task and carries its runId", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { heartbeat: { concurrent: 1, queued: 8 } } })
      const first = yield* gated("tick-1")
      const running = yield* queue.dispatch("heartbeat", "tick", first.task, { coalesce: true })
      yield* first.started
      let runs = 0
      const tick = Effect.sync(() => ++runs)
      // a task runs: coalesce has nothing waiting to join, so it adds one
      const waiting = yield* queue.dispatch("heartbeat", "tick", tick, { coalesce: true })
      expect(waiting.admission).toBe("queued")
      const joined = yield* queue.dispatch("heartbeat", "tick", tick, { coalesce: true })
      expect(joined.admission).toBe("coalesced")
      expect(joined.runId).toBe(waiting.runId)
      expect(joined.generation).toBe(waiting.generation)
      expect(running.runId).not.toBe(waiting.runId)
      yield* first.release
      expect(yield* joined.await).toBe(1)
      expect(yield* waiting.await).toBe(1)
      expect(runs).toBe(1)
    }))

  it.effect("a coalesced dispatch never fails for full", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { heartbeat: { concurrent: 1, queued: 1 } } })
      const first = yield* gated("1")
      yield* queue.dispatch("heartbeat", "tick", first.task)
      const waiting = yield* queue.dispatch("heartbeat", "tick", Effect.succeed(2))
      expect(yield* Effect.flip(queue.dispatch("heartbeat", "tick", Effect.succeed(3)))).toMatchObject({
        reason: "full"
      })
      const joined = yield* queue.dispatch("heartbeat", "tick", Effect.succeed(3), { coalesce: true })
      expect(joined.admission).toBe("coalesced")
      yield* first.release
      expect(yield* joined.await).toBe(2)
      expect(yield* waiting.await).toBe(2)
    }))

  it.effect("a full main lane never delays heartbeat or cron (lanes never wait for each other)", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const gates = []
      for (let i = 0; i < 4 + 64; i++) {
        const g = yield* gated(i)
        gates.push(g)
        yield* queue.dispatch("main", `user-${i % 4 === 0 ? i : i % 4}`, g.task)
      }
      expect(yield* Effect.flip(queue.dispatch("main", "one-more", Effect.void))).toMatchObject({ reason: "full" })
      const beat = yield* queue.dispatch("heartbeat", "beat", Effect.succeed("ok"))
      const cron = yield* queue.dispatch("cron", "job", Effect.succeed("ran"))
      expect(beat.admission).toBe("started")
      expect(yield* beat.await).toBe("ok")
      expect(yield* cron.await).toBe("ran")
      expect((yield* queue.snapshot)[0]).toMatchObject({ running: 4, waiting: 64 })
    }))
})
