import { assert, describe, expect, it } from "@effect/vitest"
import { Cause, Data, Effect, Exit, Fiber, Metric, Option } from "effect"
import { TestClock } from "effect/testing"
import type { CommandQueue } from "../../src/queue/index.js"
import { FutureTimeout, QueueFailure, RequestError } from "../../src/queue/index.js"
import { captureLogs, gated, makeQueue } from "./CommandQueue.helpers.js"

class Boom extends Data.TaggedError("Boom")<{ readonly n: number }> {}

const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  assert(Exit.isFailure(exit), "expected a failure")
  const found = Cause.findErrorOption(exit.cause)
  assert(Option.isSome(found), "expected a typed failure")
  return found.value
}

describe("CommandQueue futures", () => {
  it.effect("a task's own failure passes through unchanged", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const boom = new Boom({ n: 1 })
      const future = yield* queue.dispatch("main", "k", Effect.fail(boom))
      const error = yield* Effect.flip(future.await)
      expect(error).toBe(boom)
    }))

  it.effect("a defect stays a defect", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const future = yield* queue.dispatch("main", "k", Effect.die("kaput"))
      const exit = yield* Effect.exit(future.await)
      assert(Exit.isFailure(exit))
      expect(Cause.hasFails(exit.cause)).toBe(false)
      expect(Cause.hasDies(exit.cause)).toBe(true)
      expect(Cause.squash(exit.cause)).toBe("kaput")
    }))

  it.effect("interrupting a fiber that awaits never cancels the task", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const g = yield* gated("done")
      const future = yield* queue.dispatch("main", "k", g.task)
      const waiter = yield* Effect.forkChild(future.await)
      yield* g.started
      yield* Fiber.interrupt(waiter)
      const timed = yield* Effect.forkChild(future.awaitTimeout("1 second"))
      yield* TestClock.adjust("1 second")
      expect(failureOf(yield* Fiber.await(timed))).toBeInstanceOf(FutureTimeout)
      yield* g.release
      expect(yield* future.await).toBe("done")
    }))

  it.effect("poll never waits: none while the task is pending, its exit once settled", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const g = yield* gated(7)
      const future = yield* queue.dispatch("main", "k", g.task)
      expect(yield* future.poll).toEqual(Option.none())
      yield* g.release
      yield* future.await
      const polled = yield* future.poll
      assert(Option.isSome(polled))
      expect(Exit.isSuccess(polled.value) && polled.value.value).toBe(7)
    }))

  it.effect("awaitTimeout fails FutureTimeout with runId and timeoutMs when the deadline passes first; the task goes on", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const g = yield* gated("late")
      const future = yield* queue.dispatch("main", "k", g.task)
      const fiber = yield* Effect.forkChild(future.awaitTimeout("30 seconds"))
      yield* TestClock.adjust("30 seconds")
      const error = failureOf(yield* Fiber.await(fiber))
      expect(error).toBeInstanceOf(FutureTimeout)
      expect(error).toMatchObject({ runId: future.runId, timeoutMs: 30_000 })
      yield* g.release
      expect(yield* future.awaitTimeout("1 second")).toBe("late")
    }))

  it.effect("cancel drops a waiting task: it fails canceled at stage queued and never runs", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const g = yield* gated("first")
      yield* queue.dispatch("main", "k", g.task)
      let ran = false
      const waiting = yield* queue.dispatch("main", "k", Effect.sync(() => (ran = true)))
      yield* waiting.cancel
      const error = yield* Effect.flip(waiting.await)
      expect(error).toBeInstanceOf(QueueFailure)
      expect(error).toMatchObject({
        runId: waiting.runId,
        lane: "main",
        key: "k",
        participation: "blocking",
        stage: "queued",
        reason: "canceled"
      })
      yield* g.release
      yield* queue.dispatch("main", "k", Effect.void).pipe(Effect.flatMap((f) => f.await))
      expect(ran).toBe(false)
    }))

  it.effect("cancel interrupts a running task and returns once it has ended, finalizer included", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const events: Array<string> = []
      const g = yield* gated("never")
      const future = yield* queue.dispatch(
        "main",
        "k",
        Effect.andThen(g.task, Effect.never).pipe(
          Effect.onInterrupt(() => Effect.sync(() => events.push("task interrupted")))
        ),
        {
          finalizer: (exit) =>
            Effect.sync(() => events.push(`finalizer ${Exit.isFailure(exit) ? "failure" : "success"}`))
        }
      )
      yield* g.started
      yield* future.cancel
      expect(events).toEqual(["task interrupted", "finalizer failure"])
      expect(Option.isSome(yield* future.poll)).toBe(true)
      const error = yield* Effect.flip(future.await)
      expect(error).toMatchObject({ _tag: "QueueFailure", stage: "running", reason: "canceled" })
      expect((yield* queue.snapshot)[0]).toMatchObject({ running: 0, waiting: 0, keys: 0 })
    }))

  it.effect("cancel of a task that already ended keeps its outcome", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const future = yield* queue.dispatch("main", "k", Effect.succeed(1))
      yield* future.await
      yield* future.cancel
      expect(yield* future.await).toBe(1)
    }))

  it.effect("cancel(lane, key) cancels every task of that key and leaves other keys alone", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const g = yield* gated(1)
      const running = yield* queue.dispatch("main", "k", g.task)
      const waiting = yield* queue.dispatch("main", "k", Effect.succeed(2))
      const other = yield* queue.dispatch("main", "other", Effect.succeed(3))
      yield* g.started
      yield* queue.cancel("main", "k")
      expect(yield* Effect.flip(running.await)).toMatchObject({ reason: "canceled", stage: "running" })
      expect(yield* Effect.flip(waiting.await)).toMatchObject({ reason: "canceled", stage: "queued" })
      expect(yield* other.await).toBe(3)
      expect(yield* Effect.flip(queue.cancel("nope", "k"))).toBeInstanceOf(RequestError)
    }))
})

describe("CommandQueue timeouts", () => {
  it.effect("queueTimeoutMs fails a task not started by then (timeout, stage queued) and frees its place at once", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 1, queueTimeoutMs: 100 } } })
      const g = yield* gated("slow")
      yield* queue.dispatch("main", "a", g.task)
      yield* g.started
      const late = yield* queue.dispatch("main", "b", Effect.succeed("never"))
      expect(yield* Effect.flip(queue.dispatch("main", "c", Effect.void))).toMatchObject({ reason: "full" })
      yield* TestClock.adjust(99)
      expect(yield* late.poll).toEqual(Option.none())
      yield* TestClock.adjust(1)
      expect(yield* Effect.flip(late.await)).toMatchObject({ reason: "timeout", stage: "queued", key: "b" })
      expect((yield* queue.snapshot)[0]).toMatchObject({ running: 1, waiting: 0, keys: 1 })
      // its place is free again while the slot is still busy
      const next = yield* queue.dispatch("main", "c", Effect.succeed("c"))
      yield* g.release
      expect(yield* next.await).toBe("c")
    }))

  it.effect("queueTimeoutMs of a dispatch overrides the lane's", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 4, queueTimeoutMs: 1_000 } } })
      const g = yield* gated("slow")
      yield* queue.dispatch("main", "a", g.task)
      const quick = yield* queue.dispatch("main", "b", Effect.void, { queueTimeoutMs: 10 })
      yield* TestClock.adjust(10)
      expect(yield* Effect.flip(quick.await)).toMatchObject({ reason: "timeout", stage: "queued" })
      yield* g.release
    }))

  it.effect("turnTimeoutMs interrupts a task running longer (timeout, stage running) and the key moves on", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 4, turnTimeoutMs: 500 } } })
      let interrupted = false
      const g = yield* gated("never")
      const stuck = yield* queue.dispatch(
        "main",
        "k",
        Effect.andThen(g.task, Effect.never).pipe(Effect.onInterrupt(() => Effect.sync(() => (interrupted = true))))
      )
      const next = yield* queue.dispatch("main", "k", Effect.succeed("next"))
      yield* g.started
      yield* TestClock.adjust(500)
      expect(yield* Effect.flip(stuck.await)).toMatchObject({ reason: "timeout", stage: "running" })
      expect(interrupted).toBe(true)
      expect(yield* next.await).toBe("next")
      const g2 = yield* gated("never")
      const custom = yield* queue.dispatch("main", "j", Effect.andThen(g2.task, Effect.never), { turnTimeoutMs: 2_000 })
      yield* g2.started
      yield* TestClock.adjust(1_000)
      expect(yield* custom.poll).toEqual(Option.none())
      yield* TestClock.adjust(1_000)
      expect(yield* Effect.flip(custom.await)).toMatchObject({ reason: "timeout", stage: "running" })
    }))
})

describe("CommandQueue finalizer", () => {
  it.effect("finalizer runs exactly once for a task that ran, after it ended, with its exit", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const seen: Array<Exit.Exit<number, unknown>> = []
      const future = yield* queue.dispatch("main", "k", Effect.succeed(5), {
        finalizer: (exit) => Effect.sync(() => seen.push(exit))
      })
      expect(yield* future.await).toBe(5)
      expect(seen).toHaveLength(1)
      expect(Exit.isSuccess(seen[0]!) && seen[0].value).toBe(5)
    }))

  it.effect("finalizer runs exactly once for a dropped task (it never started)", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const g = yield* gated(0)
      yield* queue.dispatch("main", "k", g.task)
      const seen: Array<unknown> = []
      const dropped = yield* queue.dispatch("main", "k", Effect.succeed(1), {
        finalizer: (exit) => Effect.sync(() => seen.push(failureOf(exit)))
      })
      yield* dropped.cancel
      yield* dropped.cancel
      yield* g.release
      expect(seen).toHaveLength(1)
      expect(seen[0]).toMatchObject({ _tag: "QueueFailure", reason: "canceled", stage: "queued" })
    }))

  it.effect("a finalizer failure is added to the Cause of a failed task and never replaces its outcome", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue()
      const boom = new Boom({ n: 2 })
      const future = yield* queue.dispatch("main", "k", Effect.fail(boom), {
        finalizer: () => Effect.fail("finalizer broke")
      })
      const exit = yield* Effect.exit(future.await)
      expect(failureOf(exit)).toBe(boom)
      assert(Exit.isFailure(exit))
      expect(exit.cause.reasons.some((r) => Cause.isDieReason(r) && r.defect === "finalizer broke")).toBe(true)
    }))

  it.effect("a finalizer failure never changes a success; it is logged as a warning", () =>
    Effect.gen(function*() {
      const logs = captureLogs()
      const exit = yield* Effect.gen(function*() {
        const queue = yield* makeQueue()
        const future = yield* queue.dispatch("main", "k", Effect.succeed("fine"), {
          finalizer: () => Effect.die("oops")
        })
        return yield* Effect.exit(future.await)
      }).pipe(Effect.scoped, Effect.provide(logs.layer))
      expect(Exit.isSuccess(exit) && exit.value).toBe("fine")
      expect(logs.lines.some((l) => l.level === "Warn" && l.message.includes("finalizer failed"))).toBe(true)
    }))

  it.effect("the finalizer is bounded by the lane's finalizationTimeoutMs", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 1, finalizationTimeoutMs: 50 } } })
      let interrupted = false
      const future = yield* queue.dispatch("main", "k", Effect.succeed("v"), {
        finalizer: () => Effect.never.pipe(Effect.onInterrupt(() => Effect.sync(() => (interrupted = true))))
      })
      yield* Effect.yieldNow
      expect(yield* future.poll).toEqual(Option.none())
      yield* TestClock.adjust(50)
      expect(yield* future.await).toBe("v")
      expect(interrupted).toBe(true)
    }))
})

describe("CommandQueue reporting", () => {
  it.effect("onTaskExit is called once per task, after its finalizer, with runId, lane, key, generation, exit, waitedMs and ranMs", () =>
    Effect.gen(function*() {
      const events: Array<string> = []
      const reports: Array<CommandQueue.TaskReport> = []
      const queue = yield* makeQueue({
        lanes: { main: { concurrent: 1, queued: 4 } },
        onTaskExit: (report) => {
          events.push(`report ${report.runId}`)
          reports.push(report)
        }
      })
      const first = yield* gated("a")
      const fa = yield* queue.dispatch("main", "a", first.task, {
        finalizer: () => Effect.sync(() => events.push("finalizer a"))
      })
      const fb = yield* queue.dispatch("main", "b", Effect.andThen(Effect.sleep(300), Effect.succeed("b")))
      yield* first.started
      yield* TestClock.adjust(200)
      yield* first.release
      yield* fa.await
      yield* TestClock.adjust(300)
      yield* fb.await
      expect(events).toEqual(["finalizer a", `report ${fa.runId}`, `report ${fb.runId}`])
      expect(reports[0]).toMatchObject({
        runId: fa.runId,
        lane: "main",
        key: "a",
        generation: 0,
        waitedMs: 0,
        ranMs: 200
      })
      expect(reports[1]).toMatchObject({ runId: fb.runId, lane: "main", key: "b", waitedMs: 200, ranMs: 300 })
      expect(Exit.isSuccess(reports[1]!.exit)).toBe(true)
    }))

  it.effect("an onTaskExit failure or overrun of auditTimeoutMs is logged as a warning and changes nothing", () =>
    Effect.gen(function*() {
      const logs = captureLogs()
      yield* Effect.gen(function*() {
        let calls = 0
        const queue = yield* makeQueue({
          auditTimeoutMs: 100,
          onTaskExit: () => (++calls === 1 ? Effect.die("audit broke") : Effect.never)
        })
        const first = yield* queue.dispatch("main", "a", Effect.succeed(1))
        expect(yield* first.await).toBe(1)
        const second = yield* queue.dispatch("main", "b", Effect.succeed(2))
        yield* Effect.yieldNow
        yield* TestClock.adjust(100)
        expect(yield* second.await).toBe(2)
      }).pipe(Effect.scoped, Effect.provide(logs.layer))
      const warnings = logs.lines.filter((l) => l.level === "Warn").map((l) => l.message)
      expect(warnings.some((m) => m.includes("onTaskExit failed"))).toBe(true)
      expect(warnings.some((m) => m.includes("onTaskExit overran"))).toBe(true)
    }))

  it.effect("warnAfterMs logs one warning per task that waited longer to start, annotated with runId, lane, key and the wait", () =>
    Effect.gen(function*() {
      const logs = captureLogs()
      const late = yield* Effect.gen(function*() {
        const queue = yield* makeQueue({ lanes: { main: { concurrent: 1, queued: 4, warnAfterMs: 2_000 } } })
        const g = yield* gated("a")
        yield* queue.dispatch("main", "a", g.task)
        const quick = yield* queue.dispatch("main", "b", Effect.void)
        yield* g.started
        yield* TestClock.adjust(1_000)
        yield* g.release
        yield* quick.await
        const g2 = yield* gated("c")
        yield* queue.dispatch("main", "c", g2.task)
        const late = yield* queue.dispatch("main", "d", Effect.void)
        yield* g2.started
        yield* TestClock.adjust(2_500)
        yield* g2.release
        yield* late.await
        return late
      }).pipe(Effect.scoped, Effect.provide(logs.layer))
      const warnings = logs.lines.filter((l) => l.level === "Warn")
      expect(warnings).toHaveLength(1)
      expect(warnings[0]!.annotations).toEqual({ runId: late.runId, lane: "main", key: "d", waitedMs: 2_500 })
    }))

  it.effect("metrics count running and waiting per lane, tasks by outcome, and the wait time", () =>
    Effect.gen(function*() {
      const queue = yield* makeQueue({ lanes: { cron: { concurrent: 1, queued: 4 } } })
      const attr = (m: { readonly attributes?: unknown }, name: string) =>
        (m.attributes as Record<string, string> | undefined)?.[name]
      const state = (id: string, outcome?: string) =>
        Metric.snapshot.pipe(
          Effect.map((all) =>
            all.find((m) =>
              m.id === id && attr(m, "lane") === "cron" && (outcome === undefined || attr(m, "outcome") === outcome)
            )?.state
          )
        )
      const g = yield* gated(1)
      const first = yield* queue.dispatch("cron", "a", g.task)
      const dropped = yield* queue.dispatch("cron", "b", Effect.void)
      const failed = yield* queue.dispatch("cron", "c", Effect.fail("no"))
      yield* g.started
      expect(yield* state("switchyard_queue_running")).toEqual({ value: 1 })
      expect(yield* state("switchyard_queue_waiting")).toEqual({ value: 2 })
      yield* dropped.cancel
      yield* TestClock.adjust(10)
      yield* g.release
      yield* first.await
      yield* Effect.exit(failed.await)
      expect(yield* state("switchyard_queue_running")).toEqual({ value: 0 })
      expect(yield* state("switchyard_queue_waiting")).toEqual({ value: 0 })
      expect(yield* state("switchyard_queue_tasks", "success")).toMatchObject({ count: 1 })
      expect(yield* state("switchyard_queue_tasks", "canceled")).toMatchObject({ count: 1 })
      expect(yield* state("switchyard_queue_tasks", "failure")).toMatchObject({ count: 1 })
      expect(yield* state("switchyard_queue_wait_ms")).toMatchObject({ count: 2, min: 0, max: 10 })
    }).pipe(Effect.provideService(Metric.MetricRegistry, new Map())))
})
