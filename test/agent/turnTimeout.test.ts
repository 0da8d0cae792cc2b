/**
 * The agent's turn timeout: a reply stream that stalls after its headers (the SDK's own timeout ends
 * at the headers) would hold its session until a restart. The agent's lanes get `turnTimeoutMs`
 * (default 5 minutes, renewed per streamed event): the stuck turn is cut, its request aborted, its
 * message kept and answered by the retry. The real SDK and real HTTP against the local fake
 * Messages API; time is the TestClock, moved only after the stream's first chunk arrived.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Redacted } from "effect"
import { TestClock } from "effect/testing"
import { Agent, AnthropicModel, Model } from "../../src/agent/index.js"
import type { AgentEvent } from "../../src/agent/index.js"
import { withTurnTimeouts } from "../../src/agent/turnTimeouts.js"
import * as FakeAnthropic from "../support/fakeAnthropic.js"
import { bodyOf, gated, harness, isDelivered } from "./harness.js"

const failed = (e: AgentEvent): e is Extract<AgentEvent, { type: "turn-failed" }> => e.type === "turn-failed"
const isText = (e: AgentEvent) => e.type === "text"

/** Lets the agent's fibers run after a clock step (the step itself is what the assertion is about). */
const settle = Effect.forEach([1, 2, 3, 4, 5, 6, 7, 8], () => Effect.yieldNow, { discard: true })

describe("Agent turn timeout", () => {
  it.effect("a stream stalled after its first chunk is cut after DEFAULT_TURN_TIMEOUT_MS; the message is kept and the retry answers it", () =>
    Effect.gen(function*() {
      assert.strictEqual(Agent.DEFAULT_TURN_TIMEOUT_MS, 300_000)
      const fake = yield* FakeAnthropic.scoped()
      fake.enqueue(FakeAnthropic.hang("Once upon "))
      const model = yield* Effect.provide(
        Effect.service(Model),
        AnthropicModel.layer({ apiKey: Redacted.make("sk-ant-test-turn-timeout"), baseURL: fake.url, maxRetries: 0 })
      )
      const { agent, delivered, events, waitFor } = yield* harness(model)
      yield* agent.send("s", "hello")
      yield* waitFor(isText)
      // the first chunk renewed the turn's timeout: 1 ms short of it, the turn still runs
      yield* TestClock.adjust(Agent.DEFAULT_TURN_TIMEOUT_MS - 1)
      yield* settle
      assert.strictEqual(events.filter(failed).length, 0)
      yield* TestClock.adjust(1)
      yield* waitFor(failed)
      const cut = events.filter(failed)[0]!
      assert.deepStrictEqual([cut.kept, cut.retryable, cut.retryInMs, cut.messages], [true, true, 1_000, 1])
      assert.include(cut.error, "turnTimeoutMs")
      const aborted = yield* Effect.promise(() => fake.waitForAborts(1))
      assert.strictEqual(aborted.length, 1)
      // the retry (1 s later) gets the fake's default answer
      yield* TestClock.adjust(1_000)
      yield* waitFor(isDelivered)
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["Fake Claude heard: hello"])
      assert.deepStrictEqual(yield* agent.unanswered, [])
    }))

  it.effect("turnTimeoutMs sets the agent's lanes; a lane given in `lanes` keeps its own limits", () =>
    Effect.gen(function*() {
      const model = gated()
      const { agent, events, waitFor } = yield* harness(model.service, {
        turnTimeoutMs: 1_000,
        lanes: { cron: { concurrent: 1, queued: 4, turnTimeoutMs: 60_000 } }
      })
      yield* agent.send("s", "hello")
      yield* model.calls(1)
      yield* TestClock.adjust(999)
      yield* settle
      assert.strictEqual(events.filter(failed).length, 0)
      yield* TestClock.adjust(1)
      yield* waitFor(failed)
      assert.include(events.filter(failed)[0]!.error, "turnTimeoutMs")
      const lanes = (yield* agent.snapshot).lanes
      assert.deepStrictEqual(
        lanes.filter((l) => l.lane === "cron").map((l) => [l.concurrent, l.queued]),
        [[1, 4]]
      )
      yield* model.releaseAll
    }))

  it("withTurnTimeouts fills main, heartbeat and cron only where `lanes` sets no turnTimeoutMs; other lanes and fields are kept", () => {
    const lanes = withTurnTimeouts({
      main: { concurrent: 2, queued: 8 },
      cron: { concurrent: 1, queued: 4, turnTimeoutMs: 60_000 },
      slack: { concurrent: 3, queued: 9 }
    }, 5_000)
    assert.deepStrictEqual<unknown>(lanes, {
      main: { concurrent: 2, queued: 8, turnTimeoutMs: 5_000 },
      heartbeat: { turnTimeoutMs: 5_000 },
      cron: { concurrent: 1, queued: 4, turnTimeoutMs: 60_000 },
      slack: { concurrent: 3, queued: 9 }
    })
    assert.deepStrictEqual(Object.keys(withTurnTimeouts(undefined, 7)), ["main", "heartbeat", "cron"])
  })

  it.effect("a turnTimeoutMs that is not a number above 0 fails make with AgentConfigInvalid", () =>
    Effect.gen(function*() {
      for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
        const exit = yield* Effect.exit(harness(gated().service, { turnTimeoutMs: bad }))
        assert.isTrue(Exit.isFailure(exit))
        const error = Exit.isFailure(exit) ? exit.cause : undefined
        assert.include(String(error), "turnTimeoutMs")
      }
    }))
})
