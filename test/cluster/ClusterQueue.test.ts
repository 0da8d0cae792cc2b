/**
 * The cluster queue keeps the command-queue contract (command-queue.md) through effect/cluster: one
 * runner in this process, real Postgres, real sockets. Across processes: ClusterRunners.test.ts.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Option } from "effect"
import { afterAll, beforeAll } from "vitest"
import type * as ClusterQueue from "../../src/cluster/ClusterQueue.js"
import { events, gate, withClusterQueue } from "./harness.js"
import { freshDatabase, postgresAvailable } from "./pg.js"
import { freePort } from "./support.js"

const up = await postgresAvailable("test/cluster/ClusterQueue.test.ts")

describe.skipIf(!up)("ClusterQueue on one runner (Postgres)", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  let port = 0
  beforeAll(async () => {
    db = await freshDatabase("cq")
    port = await freePort()
  }, 30_000)
  afterAll(async () => {
    await db?.drop()
  })

  const withQueue = <A, E>(f: (q: ClusterQueue.ClusterQueue) => Effect.Effect<A, E>) =>
    withClusterQueue(db!.url, port, f)

  it.live(
    "dispatch returns once the run is durable; await gives the handler's value; the future names the run",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          const f = yield* q.dispatch("main", "s1", { op: "echo", value: { hello: "world" } })
          assert.strictEqual(f.admission, "queued")
          assert.strictEqual(f.lane, "main")
          assert.strictEqual(f.key, "s1")
          assert.strictEqual(f.generation, 0)
          assert.deepStrictEqual(yield* f.await, { hello: "world" })
          assert.deepStrictEqual(yield* f.poll, Option.some(Exit.succeed({ hello: "world" })))
        })
      ),
    30_000
  )

  it.live(
    "failures: the handler's own failure comes back unchanged; a defect stays a defect",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          const failed = yield* Effect.exit(
            (yield* q.dispatch("main", "s2", { op: "fail", error: { code: 42 } })).await
          )
          assert.deepStrictEqual(failed, Exit.fail({ code: 42 }))
          const died = yield* Effect.exit((yield* q.dispatch("main", "s2", { op: "die" })).await)
          assert.isTrue(Exit.isFailure(died) && Cause.hasDies(died.cause))
        })
      ),
    30_000
  )

  it.live(
    "RequestError: an unknown lane, an empty key, a command that is not JSON, a bad option",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          const tags = yield* Effect.all([
            q.dispatch("nope", "k", 1),
            q.dispatch("main", "", 1),
            q.dispatch("main", "k", { f: () => 1 }),
            q.dispatch("main", "k", 1, { turnTimeoutMs: -1 })
          ].map((e) => Effect.flip(e).pipe(Effect.map((x) => x._tag))))
          assert.deepStrictEqual(tags, ["RequestError", "RequestError", "RequestError", "RequestError"])
        })
      ),
    30_000
  )

  it.live(
    "per-key exclusivity: runs of one key never overlap and start in dispatch order",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          events.length = 0
          const futures = []
          for (let i = 0; i < 4; i++) futures.push(yield* q.dispatch("main", "order", { op: "echo", value: i }))
          const values = yield* Effect.forEach(futures, (f) => f.await)
          assert.deepStrictEqual(values, [0, 1, 2, 3])
          const mine = events.filter((e) => e.includes(":order:"))
          const expected = futures.flatMap((f) => [`start:order:${f.runId}`, `end:order:${f.runId}`])
          assert.deepStrictEqual(mine, expected)
        })
      ),
    30_000
  )

  it.live(
    "cancel: a running run is interrupted and its future fails QueueFailure canceled (running); a waiting one never runs",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          events.length = 0
          const running = yield* q.dispatch("main", "c1", { op: "block", gate: "never-1", started: "c1-started" })
          const waiting = yield* q.dispatch("main", "c1", { op: "echo", value: "late" })
          yield* Deferred.await(gate("c1-started"))
          yield* waiting.cancel
          yield* running.cancel
          const r = yield* Effect.flip(running.await)
          const w = yield* Effect.flip(waiting.await)
          assert.deepInclude(r, { _tag: "QueueFailure", reason: "canceled", stage: "running", runId: running.runId })
          assert.deepInclude(w, { _tag: "QueueFailure", reason: "canceled", stage: "queued", runId: waiting.runId })
          assert.include(events, `interrupted:${running.runId}`)
          assert.notInclude(events, `start:c1:${waiting.runId}`)
        })
      ),
    30_000
  )

  it.live("awaitTimeout fails FutureTimeout and the run goes on", () =>
    withQueue((q) =>
      Effect.gen(function*() {
        const f = yield* q.dispatch("main", "t1", { op: "block", gate: "t1-go", value: "done" })
        const e = yield* Effect.flip(f.awaitTimeout("20 millis"))
        assert.deepInclude(e, { _tag: "FutureTimeout", runId: f.runId, timeoutMs: 20 })
        assert.isTrue(Option.isNone(yield* f.poll))
        yield* Deferred.succeed(gate("t1-go"), undefined)
        assert.strictEqual(yield* f.await, "done")
      })
    ), 30_000)

  it.live(
    "a re-sent dispatch with the same runId joins the first run: it runs once",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          events.length = 0
          const a = yield* q.dispatch("main", "dup", { op: "echo", value: 1 }, { runId: "fixed-run-1" })
          const b = yield* q.dispatch("main", "dup", { op: "echo", value: 1 }, { runId: "fixed-run-1" })
          assert.strictEqual(yield* a.await, 1)
          assert.strictEqual(yield* b.await, 1)
          assert.strictEqual(events.filter((e) => e === "start:dup:fixed-run-1").length, 1)
        })
      ),
    30_000
  )

  it.live(
    "restartLane: running runs are interrupted stale, waiting ones fail stale and never run, later dispatches run",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          events.length = 0
          const running = yield* q.dispatch("main", "r1", { op: "block", gate: "never-2", started: "r1-started" })
          const waiting = yield* q.dispatch("main", "r1", { op: "echo", value: "stale" })
          yield* Deferred.await(gate("r1-started"))
          const generation = yield* q.restartLane("main")
          assert.strictEqual(generation, 1)
          assert.strictEqual(yield* q.generation("main"), 1)
          assert.deepInclude(yield* Effect.flip(running.await), {
            _tag: "QueueFailure",
            reason: "stale",
            stage: "running"
          })
          assert.deepInclude(yield* Effect.flip(waiting.await), { _tag: "QueueFailure", reason: "stale" })
          assert.notInclude(events, `start:r1:${waiting.runId}`)
          const after = yield* q.dispatch("main", "r1", { op: "echo", value: "fresh" })
          assert.strictEqual(after.generation, 1)
          assert.strictEqual(yield* after.await, "fresh")
        })
      ),
    30_000
  )

  it.live(
    "drain closes admission at once: later dispatches fail AdmissionError closed; the report counts what ended",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          const f = yield* q.dispatch("main", "d1", { op: "echo", value: 1 })
          const report = yield* q.drain({ timeoutMs: 10_000 })
          assert.strictEqual(yield* f.await, 1)
          assert.deepStrictEqual(report, { completed: 1, canceled: 0, timedOut: false })
          const e = yield* Effect.flip(q.dispatch("main", "d1", { op: "echo", value: 2 }))
          assert.deepInclude(e, { _tag: "AdmissionError", reason: "closed" })
        })
      ),
    30_000
  )
})
