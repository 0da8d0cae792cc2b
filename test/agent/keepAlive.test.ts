/**
 * AnthropicModel inside a queue task: every streamed event calls `CommandQueue.keepAlive`, so a long
 * reply still arriving is not cut by `turnTimeoutMs` and a stuck one is. The real SDK and real HTTP
 * against the local fake Messages API; the queue's time is the TestClock, moved only after a chunk
 * has arrived (a latch), so nothing depends on how fast the machine is.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Queue, Redacted } from "effect"
import { TestClock } from "effect/testing"
import { AnthropicModel } from "../../src/agent/index.js"
import { Model } from "../../src/agent/Model.js"
import type { ModelRequest } from "../../src/agent/Model.js"
import { CommandQueue } from "../../src/queue/index.js"
import * as FakeAnthropic from "../support/fakeAnthropic.js"

const request = (onText: (chunk: string) => void): ModelRequest => ({
  system: "You are terse.",
  transcript: [{ role: "user", content: "Tell me a long story." }],
  maxTokens: 512,
  onText
})

const setup = Effect.gen(function*() {
  const fake = yield* FakeAnthropic.scoped()
  const layer = AnthropicModel.layer({
    apiKey: Redacted.make("sk-ant-test-keepalive"),
    baseURL: fake.url,
    maxRetries: 0
  })
  const model = yield* Effect.provide(Effect.service(Model), layer)
  const queue = yield* CommandQueue.make({ lanes: { main: { concurrent: 2, queued: 4, turnTimeoutMs: 1_000 } } })
  yield* Effect.addFinalizer(() => queue.drain({ timeoutMs: 0 }))
  const chunks = yield* Queue.unbounded<string>()
  const onText = (chunk: string) => {
    Queue.offerUnsafe(chunks, chunk)
  }
  return { fake, model, queue, chunks, onText }
})

describe("Agent streaming and turnTimeoutMs", () => {
  it.effect("a streamed reply renews turnTimeoutMs per chunk: 5 chunks 600 ms apart (3 s) under a 1 s turn timeout", () =>
    Effect.gen(function*() {
      const { chunks, fake, model, onText, queue } = yield* setup
      const words = ["Once ", "upon ", "a ", "time, ", "the end."]
      // the fake sends chunk i only once the test has let 600 ms pass after chunk i - 1
      const next = yield* Queue.unbounded<void>()
      const beforeChunk = () => Effect.runPromise(Queue.take(next))
      fake.enqueue(FakeAnthropic.text(words.join(""), { chunks: words, beforeChunk }))
      const turn = yield* queue.dispatch("main", "session", model.reply(request(onText)))
      for (let i = 0; i < words.length; i++) {
        expect(yield* Queue.take(chunks)).toBe(words[i])
        // the chunk has arrived (and renewed the turn); now 600 ms pass before the next one
        yield* TestClock.adjust(600)
        if (i === words.length - 1) break
        // 600 ms after chunk i, and 600 * i since the turn began: still running
        expect((yield* turn.poll)._tag).toBe("None")
        yield* Queue.offer(next, undefined)
      }
      const reply = yield* turn.await
      expect(reply.text).toBe("Once upon a time, the end.")
    }))

  it.effect("a stuck stream is still cut by turnTimeoutMs, counted from its last chunk, and the request is aborted", () =>
    Effect.gen(function*() {
      const { chunks, fake, model, onText, queue } = yield* setup
      fake.enqueue(FakeAnthropic.hang("Once upon "))
      const turn = yield* queue.dispatch("main", "session", model.reply(request(onText)))
      expect(yield* Queue.take(chunks)).toBe("Once upon ")
      yield* TestClock.adjust(999)
      expect((yield* turn.poll)._tag).toBe("None")
      yield* TestClock.adjust(1)
      expect(yield* Effect.flip(turn.await)).toMatchObject({
        _tag: "QueueFailure",
        reason: "timeout",
        stage: "running"
      })
      const aborted = yield* Effect.promise(() => fake.waitForAborts(1))
      expect(aborted).toHaveLength(1)
    }))
})
