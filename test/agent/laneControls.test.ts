/**
 * The agent's lane controls: pauseLane, resumeLane, setLaneLimits pass through to the queue while
 * the agent runs, and a paused lane does not hold the shutdown to its drain deadline. Coordination
 * is the gated model, agent events and Deferreds, never sleeps.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { RequestError } from "../../src/queue/index.js"
import { bodyOf, gated, harness, isDelivered, recording, started, tempDir } from "./harness.js"

const laneOf = <L extends { readonly lane: string }>(lanes: ReadonlyArray<L>, name: string): L =>
  lanes.find((l) => l.lane === name)!

describe("Agent lane controls", () => {
  it.effect("pauseLane(main): messages are accepted and wait, nothing calls the model; resumeLane answers them", () =>
    Effect.gen(function*() {
      const model = gated()
      const { agent, delivered, waitFor } = yield* harness(model.service, { beforeClose: model.releaseAll })
      yield* agent.pauseLane("main")
      const future = yield* agent.send("s", "held")
      assert.strictEqual(future.admission, "queued")
      const paused = laneOf((yield* agent.snapshot).lanes, "main")
      assert.deepStrictEqual([paused.paused, paused.running, paused.waiting], [true, 0, 1])
      yield* Effect.yieldNow
      assert.strictEqual(model.requests.length, 0)
      yield* agent.resumeLane("main")
      assert.strictEqual(laneOf((yield* agent.snapshot).lanes, "main").paused, false)
      yield* model.calls(1)
      yield* model.release(0)
      assert.strictEqual((yield* future.await).text, "You said: held")
      yield* waitFor(isDelivered)
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: held"])
    }))

  it.effect("pauseLane and resumeLane of an unknown lane are a RequestError naming the lanes", () =>
    Effect.gen(function*() {
      const { agent } = yield* harness(recording().service)
      for (const control of [agent.pauseLane, agent.resumeLane]) {
        const error = yield* Effect.flip(control("bogus"))
        assert.instanceOf(error, RequestError)
        assert.include(error.message, "`main`, `heartbeat`, `cron`")
      }
    }))

  it.effect("setLaneLimits(main, { concurrent: 2 }) starts a waiting session's turn at once; a bad value names its field", () =>
    Effect.gen(function*() {
      const model = gated()
      const { agent, waitFor } = yield* harness(model.service, {
        lanes: { main: { concurrent: 1, queued: 8 } },
        beforeClose: model.releaseAll
      })
      yield* agent.send("a", "first")
      const second = yield* agent.send("b", "second")
      assert.strictEqual(second.admission, "queued")
      yield* model.calls(1)
      yield* agent.setLaneLimits("main", { concurrent: 2 })
      yield* model.calls(2)
      yield* waitFor(started("user"), 2)
      const lane = laneOf((yield* agent.snapshot).lanes, "main")
      assert.deepStrictEqual([lane.concurrent, lane.queued, lane.running, lane.waiting], [2, 8, 2, 0])
      const bad = yield* Effect.flip(agent.setLaneLimits("main", { concurrent: 1.5 }))
      assert.deepStrictEqual([bad._tag, bad.field], ["RequestError", "limits.concurrent"])
      const unknown = yield* Effect.flip(agent.setLaneLimits("bogus", { concurrent: 1 }))
      assert.instanceOf(unknown, RequestError)
      assert.strictEqual(laneOf((yield* agent.snapshot).lanes, "main").concurrent, 2)
    }))

  it.effect("shutdown with main paused drops its waiting turn at once; the message stays accepted and is answered on the next start", () =>
    Effect.gen(function*() {
      const stateDir = yield* tempDir
      const report = yield* Effect.scoped(Effect.gen(function*() {
        const { agent } = yield* harness(recording().service, { stateDir })
        yield* agent.pauseLane("main")
        yield* agent.send("s", "after the restart")
        // Under the TestClock the drain's 30 s deadline never passes: this returns only if nothing waits for it.
        return yield* agent.shutdown
      }))
      assert.deepStrictEqual(report, {
        drain: { completed: 0, canceled: 0, timedOut: false },
        pendingDeliveries: 0,
        unanswered: 1
      })
      const { agent, delivered, waitFor } = yield* harness(recording().service, { stateDir })
      yield* waitFor(isDelivered)
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: after the restart"])
      assert.strictEqual(laneOf((yield* agent.snapshot).lanes, "main").paused, false)
    }))
})
