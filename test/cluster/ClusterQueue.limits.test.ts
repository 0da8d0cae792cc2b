/**
 * The cluster queue keeps the command-queue rules on timeouts, coalescing, cancel by key, the
 * admission bound and the snapshot (one in-process runner, real Postgres and sockets).
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect } from "effect"
import { afterAll, beforeAll } from "vitest"
import type * as ClusterQueue from "../../src/cluster/ClusterQueue.js"
import { events, gate, withClusterQueue } from "./harness.js"
import { freshDatabase, postgresAvailable } from "./pg.js"
import { freePort } from "./support.js"

const up = await postgresAvailable("test/cluster/ClusterQueue.limits.test.ts")

describe.skipIf(!up)("ClusterQueue limits on one runner (Postgres)", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  let port = 0
  beforeAll(async () => {
    db = await freshDatabase("cqlimits")
    port = await freePort()
  }, 30_000)
  afterAll(async () => {
    await db?.drop()
  })
  const withQueue = <A, E>(f: (q: ClusterQueue.ClusterQueue) => Effect.Effect<A, E>) =>
    withClusterQueue(db!.url, port, f)

  it.live(
    "turnTimeoutMs: a run running longer is interrupted and fails QueueFailure timeout (running)",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          events.length = 0
          const f = yield* q.dispatch("main", "tt", { op: "block", gate: "never-tt" }, { turnTimeoutMs: 50 })
          assert.deepInclude(yield* Effect.flip(f.await), {
            _tag: "QueueFailure",
            reason: "timeout",
            stage: "running",
            runId: f.runId
          })
          assert.include(events, `interrupted:${f.runId}`)
        })
      ),
    30_000
  )

  it.live(
    "queueTimeoutMs: a run not started in time fails QueueFailure timeout (queued) and never runs",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          events.length = 0
          const first = yield* q.dispatch("main", "qt", { op: "block", gate: "qt-go", started: "qt-started" })
          yield* Deferred.await(gate("qt-started"))
          const late = yield* q.dispatch("main", "qt", { op: "echo", value: 1 }, { queueTimeoutMs: 50 })
          assert.deepInclude(yield* Effect.flip(late.await), {
            _tag: "QueueFailure",
            reason: "timeout",
            stage: "queued"
          })
          yield* Deferred.succeed(gate("qt-go"), undefined)
          assert.strictEqual(yield* first.await, "unblocked")
          assert.notInclude(events, `start:qt:${late.runId}`)
        })
      ),
    30_000
  )

  it.live(
    "coalesce: a coalescing dispatch joins the key's coalesced run that waits (its runId, admission coalesced); a trigger during a run owes one follow-up",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          events.length = 0
          const running = yield* q.dispatch("main", "co", { op: "block", gate: "co-go", started: "co-started" }, {
            coalesce: true
          })
          assert.strictEqual(running.admission, "queued")
          yield* Deferred.await(gate("co-started"))
          // the first run has started: a tick now owes exactly one follow-up ...
          const followUp = yield* q.dispatch("main", "co", { op: "echo", value: "first" }, { coalesce: true })
          assert.strictEqual(followUp.admission, "queued")
          // ... and later ticks join that follow-up while it waits
          const joined = yield* q.dispatch("main", "co", { op: "echo", value: "second" }, { coalesce: true })
          const joinedAgain = yield* q.dispatch("main", "co", { op: "echo", value: "third" }, { coalesce: true })
          assert.deepStrictEqual([joined.admission, joined.runId], ["coalesced", followUp.runId])
          assert.deepStrictEqual([joinedAgain.admission, joinedAgain.runId], ["coalesced", followUp.runId])
          yield* Deferred.succeed(gate("co-go"), undefined)
          assert.strictEqual(yield* running.await, "unblocked")
          assert.deepStrictEqual(yield* Effect.all([followUp.await, joined.await, joinedAgain.await]), [
            "first",
            "first",
            "first"
          ])
          assert.deepStrictEqual(events.filter((e) => e.startsWith("start:co:")), [
            `start:co:${running.runId}`,
            `start:co:${followUp.runId}`
          ])
          const bad = yield* Effect.flip(q.dispatch("main", "co", 1, { coalesce: true, runId: "x" }))
          assert.strictEqual(bad._tag, "RequestError")
        })
      ),
    30_000
  )

  it.live(
    "coalesce: a coalesced run that ended without running (stale) is not joined by later ticks",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          const running = yield* q.dispatch("main", "cs", { op: "block", gate: "never-cs", started: "cs-started" }, {
            coalesce: true
          })
          yield* Deferred.await(gate("cs-started"))
          const waiting = yield* q.dispatch("main", "cs", { op: "echo", value: "stale" }, { coalesce: true })
          yield* q.restartLane("main")
          assert.deepInclude(yield* Effect.flip(running.await), { reason: "stale" })
          assert.deepInclude(yield* Effect.flip(waiting.await), { reason: "stale" })
          const next = yield* q.dispatch("main", "cs", { op: "echo", value: "fresh" }, { coalesce: true })
          assert.strictEqual(next.admission, "queued")
          assert.notStrictEqual(next.runId, waiting.runId)
          assert.strictEqual(yield* next.await, "fresh")
        })
      ),
    30_000
  )

  it.live(
    "cancel(lane, key): every run of the key on its runner fails canceled and has ended when it returns",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          events.length = 0
          const running = yield* q.dispatch("main", "ck", { op: "block", gate: "never-ck", started: "ck-started" })
          const waiting = yield* q.dispatch("main", "ck", { op: "block", gate: "never-ck2" })
          yield* Deferred.await(gate("ck-started"))
          yield* q.cancel("main", "ck")
          assert.include(events, `end:ck:${running.runId}`)
          assert.deepInclude(yield* Effect.flip(running.await), {
            _tag: "QueueFailure",
            reason: "canceled",
            stage: "running"
          })
          assert.deepInclude(yield* Effect.flip(waiting.await), {
            _tag: "QueueFailure",
            reason: "canceled",
            stage: "queued"
          })
          assert.notInclude(events, `start:ck:${waiting.runId}`)
        })
      ),
    30_000
  )

  it.live(
    "ownership bound: a process holds at most concurrent + queued unanswered dispatches per lane, then AdmissionError full; snapshot shows the runner's lane",
    () =>
      withQueue((q) =>
        Effect.gen(function*() {
          const futures = []
          // main is { concurrent: 2, queued: 8 } here: 10 may be owned at once.
          for (let i = 0; i < 10; i++) {
            futures.push(yield* q.dispatch("main", `full-${i}`, { op: "block", gate: "full-go" }))
          }
          const refused = yield* Effect.flip(q.dispatch("main", "full-x", { op: "echo", value: 1 }))
          assert.deepInclude(refused, { _tag: "AdmissionError", reason: "full", lane: "main", key: "full-x" })
          // the runner fills its two slots (a condition with a deadline, not a sleep)
          const main = yield* q.snapshot.pipe(
            Effect.map((lanes) => lanes.find((l) => l.lane === "main")!),
            Effect.repeat({ until: (l) => l.running === 2 }),
            Effect.timeout("10 seconds")
          )
          assert.deepInclude(main, {
            running: 2,
            concurrent: 2,
            queued: 8,
            generation: yield* q.generation("main"),
            draining: false
          })
          yield* Deferred.succeed(gate("full-go"), undefined)
          for (const f of futures) assert.strictEqual(yield* f.await, "unblocked")
          const after = yield* q.dispatch("main", "full-x", { op: "echo", value: 1 })
          assert.strictEqual(yield* after.await, 1)
        })
      ),
    30_000
  )
})
