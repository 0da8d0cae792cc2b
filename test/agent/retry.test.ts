/**
 * A turn whose model call (or log write) fails: its messages stay accepted, the session is retried
 * after 1 s, 5 s, 30 s, then every 60 s on the TestClock; a `retryable: false` error waits for a new
 * message or `retry`; `unanswered` and the shutdown report count what is owed; a log that reports
 * itself healthy again gets its failed turns retried at once.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { TestClock } from "effect/testing"
import * as path from "node:path"
import { ModelError, ScriptedModel } from "../../src/agent/index.js"
import type { AgentEvent, Model, ModelRequest } from "../../src/agent/index.js"
import { DeliveryLog, DeliveryLogError } from "../../src/delivery/index.js"
import { bodyOf, harness, isDelivered, tempDir, withoutFused } from "./harness.js"

/** A model that fails the calls `fail(n)` says (n from 1), and replies by the scripted rule otherwise. */
const flaky = (fail: (n: number) => ModelError | undefined) => {
  const requests: Array<ModelRequest> = []
  const inner = ScriptedModel.make({ latencyMs: 0 })
  const service: Model["Service"] = {
    reply: (request) =>
      Effect.suspend(() => {
        requests.push(request)
        const error = fail(requests.length)
        return error === undefined ? inner.reply(request) : Effect.fail(error)
      })
  }
  return { requests, service }
}

const network = new ModelError({
  reason: "network",
  message: "Connection error: getaddrinfo ENOTFOUND api.anthropic.com",
  retryable: true
})
const auth = new ModelError({ reason: "auth", message: "Anthropic rejected the API key (401)", retryable: false })
const failed = (e: AgentEvent): e is Extract<AgentEvent, { type: "turn-failed" }> => e.type === "turn-failed"

/** Lets the agent's fibers run after a clock step (the step itself is what the assertion is about). */
const settle = Effect.forEach([1, 2, 3, 4, 5, 6, 7, 8], () => Effect.yieldNow, { discard: true })

describe("Agent retries", () => {
  it.effect("a failing model call keeps the message and is retried after 1 s, 5 s, 30 s, 60 s, 60 s; then answered", () =>
    Effect.gen(function*() {
      const model = flaky((n) => (n <= 5 ? network : undefined))
      const { agent, delivered, events, waitFor } = yield* harness(model.service)
      yield* agent.send("s", "hello")
      yield* waitFor(failed)
      const first = events.filter(failed)[0]!
      assert.deepStrictEqual([first.kept, first.retryable, first.retryInMs, first.messages], [true, true, 1_000, 1])
      const [owed] = yield* agent.unanswered
      assert.strictEqual(owed!.session, "s")
      assert.strictEqual(owed!.messages, 1)
      assert.strictEqual(owed!.failure!.attempts, 1)
      assert.include(owed!.failure!.error, "ENOTFOUND")
      assert.isNumber(owed!.failure!.retryAt)
      const delays = [1_000, 5_000, 30_000, 60_000, 60_000]
      for (let i = 0; i < delays.length; i++) {
        yield* TestClock.adjust(delays[i]! - 1)
        yield* settle
        assert.strictEqual(model.requests.length, i + 1, `no call before ${delays[i]} ms`)
        yield* TestClock.adjust(1)
        if (i < 4) {
          yield* waitFor(failed, i + 2)
          assert.strictEqual(events.filter(failed)[i + 1]!.retryInMs, delays[i + 1])
        }
      }
      yield* waitFor(isDelivered)
      assert.strictEqual(model.requests.length, 6)
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: hello"])
      assert.deepStrictEqual(yield* agent.unanswered, [])
    }))

  it.effect("retryable: false waits: no automatic retry; a new message of the session, or retry(), answers everything kept", () =>
    Effect.gen(function*() {
      let down = true
      const model = flaky(() => (down ? auth : undefined))
      const { agent, delivered, events, waitFor } = yield* harness(model.service)
      yield* agent.send("a", "one")
      yield* agent.send("b", "uno")
      yield* waitFor(failed, 2)
      assert.isTrue(events.filter(failed).every((e) => e.retryInMs === undefined && !e.retryable && e.kept))
      yield* TestClock.adjust(3_600_000)
      yield* settle
      assert.strictEqual(model.requests.length, 2)
      const owed = yield* agent.unanswered
      assert.deepStrictEqual(owed.map((s) => [s.session, s.messages, s.failure?.retryAt]), [["a", 1, undefined], [
        "b",
        1,
        undefined
      ]])
      down = false
      // A new message: one turn answers both messages of that session.
      const result = yield* Effect.flatMap(agent.send("a", "two"), (f) => f.await)
      assert.strictEqual(result.messages, 2)
      // /retry for the other one.
      assert.strictEqual(yield* agent.retry(), 1)
      yield* waitFor(isDelivered, 2)
      assert.deepStrictEqual(delivered.map((e) => [e.message.to, bodyOf(e).text]), [["a", "You said: one / two"], [
        "b",
        "You said: uno"
      ]])
      assert.deepStrictEqual(yield* agent.unanswered, [])
    }))

  it.effect("shutdown reports the messages still unanswered (the chatbot's exit code 3); the next start answers them", () =>
    Effect.gen(function*() {
      const stateDir = yield* tempDir
      const report = yield* Effect.scoped(Effect.gen(function*() {
        const { agent, waitFor } = yield* harness(flaky(() => network).service, { stateDir })
        yield* agent.sendAll("s", ["x", "y"])
        yield* waitFor(failed)
        const snapshot = yield* agent.snapshot
        assert.deepStrictEqual(snapshot.unanswered.map((s) => s.messages), [2])
        assert.deepStrictEqual(snapshot.log, { status: "ok" })
        return yield* agent.shutdown
      }))
      assert.strictEqual(report.unanswered, 2)
      const { delivered, waitFor } = yield* harness(flaky(() => undefined).service, { stateDir })
      yield* waitFor(isDelivered)
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: x / y"])
    }))

  it.effect("a delivery log that fails and reports itself healthy again: the failed turn is retried at once, before its backoff", () =>
    Effect.gen(function*() {
      const stateDir = yield* tempDir
      const real = yield* DeliveryLog.open({ dir: path.join(stateDir, "deliveries"), fsync: "never" })
      const since = Date.now()
      let failing = true
      const enospc = new DeliveryLogError({
        reason: "io",
        message: `ENOSPC: no space left on device, write '${stateDir}/deliveries/00000001.seg'`
      })
      const log = {
        ...withoutFused(real),
        append: (m: Parameters<typeof real.append>[0]) => (failing ? Effect.fail(enospc) : real.append(m)),
        health: Effect.sync(
          () => (failing ? { status: "failing" as const, since, error: enospc } : { status: "ok" as const })
        )
      }
      const { agent, delivered, events, waitFor } = yield* harness(flaky(() => undefined).service, { stateDir, log })
      yield* agent.send("s", "kept")
      yield* waitFor(failed)
      yield* TestClock.adjust(1_000)
      yield* waitFor(failed, 2)
      yield* TestClock.adjust(5_000)
      yield* waitFor(failed, 3) // the next automatic retry is 30 s away
      const snapshot = yield* agent.snapshot
      assert.deepStrictEqual(snapshot.log, { status: "failing", since, error: enospc.message })
      assert.isTrue(events.some((e) => e.type === "log-health" && e.status === "failing"))
      failing = false
      yield* TestClock.adjust(1_000) // one health poll
      yield* waitFor(isDelivered)
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: kept"])
      assert.isTrue(events.some((e) => e.type === "log-health" && e.status === "ok"))
      assert.deepStrictEqual((yield* agent.snapshot).log, { status: "ok" })
    }))

  it.effect("the model's own retries inside a turn are reported as model-retry events; the turn then ends", () =>
    Effect.gen(function*() {
      const inner = ScriptedModel.make({ latencyMs: 0 })
      const model: Model["Service"] = {
        reply: (request) =>
          Effect.suspend(() => {
            request.onRetry?.({ reason: "rate-limit", status: 429, retryInMs: 20_000, retry: 1, maxRetries: 2 })
            request.onRetry?.({ reason: "network", retry: 2, maxRetries: 2 })
            return inner.reply(request)
          })
      }
      const { agent, delivered, events, waitFor } = yield* harness(model)
      yield* agent.send("s", "hello")
      yield* waitFor((e) => e.type === "turn-ended")
      const retries = events.filter((e) => e.type === "model-retry")
      assert.deepStrictEqual(retries, [
        {
          type: "model-retry",
          kind: "user",
          session: "s",
          turn: 1,
          reason: "rate-limit",
          status: 429,
          retryInMs: 20_000,
          retry: 1,
          maxRetries: 2
        },
        { type: "model-retry", kind: "user", session: "s", turn: 1, reason: "network", retry: 2, maxRetries: 2 }
      ])
      assert.isBelow(events.indexOf(retries[1]!), events.findIndex((e) => e.type === "turn-ended"))
      yield* waitFor(isDelivered)
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: hello"])
      assert.strictEqual(events.filter(failed).length, 0)
    }))
})
