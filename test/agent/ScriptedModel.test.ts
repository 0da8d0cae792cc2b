import { assert, describe, it } from "@effect/vitest"
import type { Layer } from "effect"
import { Effect, Exit, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { ScriptedModel } from "../../src/agent/index.js"
import {
  DEFAULT_HEARTBEAT_PROMPT,
  HEARTBEAT_OK,
  Model,
  type ModelRequest,
  type TranscriptMessage
} from "../../src/agent/Model.js"

const user = (content: string): TranscriptMessage => ({ role: "user", content })
const assistant = (content: string): TranscriptMessage => ({ role: "assistant", content })

const request = (transcript: ReadonlyArray<TranscriptMessage>, onText?: (chunk: string) => void): ModelRequest => ({
  system: "You are a test.",
  transcript,
  maxTokens: 256,
  ...(onText === undefined ? {} : { onText })
})

/** Forks a reply under the TestClock, advances the clock by `ms`, and returns the finished reply. */
const replyAfter = (layer: Layer.Layer<Model>, req: ModelRequest, ms: number) =>
  Effect.gen(function*() {
    const model = yield* Model
    const fiber = yield* Effect.forkChild(model.reply(req))
    yield* TestClock.adjust(ms)
    return yield* Fiber.join(fiber)
  }).pipe(Effect.provide(layer))

describe("ScriptedModel", () => {
  describe("reply rule", () => {
    it.effect("replies `You said: ` and the single new user message", () =>
      Effect.gen(function*() {
        const reply = yield* replyAfter(ScriptedModel.layer(), request([user("hello")]), 300)
        assert.strictEqual(reply.text, "You said: hello")
      }))

    it.effect("answers only the user messages after the last assistant message, joined with ` / `", () =>
      Effect.gen(function*() {
        const transcript = [
          user("old one"),
          assistant("You said: old one"),
          user("first"),
          user("second"),
          user("third")
        ]
        const reply = yield* replyAfter(ScriptedModel.layer(), request(transcript), 300)
        assert.strictEqual(reply.text, "You said: first / second / third")
      }))

    it.effect("is deterministic: the same transcript gives the same reply", () =>
      Effect.gen(function*() {
        const transcript = [user("a"), assistant("b"), user("c")]
        const one = yield* replyAfter(ScriptedModel.layer({ latencyMs: 0 }), request(transcript), 0)
        const two = yield* replyAfter(ScriptedModel.layer({ latencyMs: 0 }), request(transcript), 0)
        assert.deepStrictEqual(one, two)
        assert.strictEqual(one.text, "You said: c")
      }))
  })

  describe("heartbeat", () => {
    it.effect("replies exactly HEARTBEAT_OK to the default heartbeat prompt", () =>
      Effect.gen(function*() {
        const transcript = [user("hi"), assistant("You said: hi"), user(DEFAULT_HEARTBEAT_PROMPT)]
        const reply = yield* replyAfter(ScriptedModel.layer(), request(transcript), 300)
        assert.strictEqual(reply.text, HEARTBEAT_OK)
      }))

    it.effect("replies exactly HEARTBEAT_OK to any prompt that contains HEARTBEAT_OK", () =>
      Effect.gen(function*() {
        const reply = yield* replyAfter(
          ScriptedModel.layer(),
          request([user("Anything new? If not, say HEARTBEAT_OK.")]),
          300
        )
        assert.strictEqual(reply.text, HEARTBEAT_OK)
      }))

    it.effect("echoes a user message that arrives in the same turn as a heartbeat prompt", () =>
      Effect.gen(function*() {
        const reply = yield* replyAfter(
          ScriptedModel.layer(),
          request([user("real question"), user(DEFAULT_HEARTBEAT_PROMPT)]),
          300
        )
        assert.strictEqual(reply.text, `You said: real question / ${DEFAULT_HEARTBEAT_PROMPT}`)
      }))

    it.effect("an old heartbeat prompt before the last assistant message does not count", () =>
      Effect.gen(function*() {
        const transcript = [user(DEFAULT_HEARTBEAT_PROMPT), assistant(HEARTBEAT_OK), user("ping")]
        const reply = yield* replyAfter(ScriptedModel.layer(), request(transcript), 300)
        assert.strictEqual(reply.text, "You said: ping")
      }))
  })

  describe("latency", () => {
    it.effect("latency honoured: no reply before `latencyMs`, the reply at `latencyMs` (default 300)", () =>
      Effect.gen(function*() {
        const model = yield* Model
        const fiber = yield* Effect.forkChild(model.reply(request([user("one two three four five")])))
        yield* TestClock.adjust(299)
        assert.isUndefined(fiber.pollUnsafe())
        yield* TestClock.adjust(1)
        const reply = yield* Fiber.join(fiber)
        assert.strictEqual(reply.text, "You said: one two three four five")
      }).pipe(Effect.provide(ScriptedModel.layer())))

    it.effect("latency honoured with a custom `latencyMs`", () =>
      Effect.gen(function*() {
        const model = yield* Model
        const fiber = yield* Effect.forkChild(model.reply(request([user("x")])))
        yield* TestClock.adjust(1_999)
        assert.isUndefined(fiber.pollUnsafe())
        yield* TestClock.adjust(1)
        assert.strictEqual((yield* Fiber.join(fiber)).text, "You said: x")
      }).pipe(Effect.provide(ScriptedModel.layer({ latencyMs: 2_000 }))))

    it.effect("latencyMs 0 replies without the clock moving", () =>
      Effect.gen(function*() {
        const model = yield* Model
        const reply = yield* model.reply(request([user("now")]))
        assert.strictEqual(reply.text, "You said: now")
      }).pipe(Effect.provide(ScriptedModel.layer({ latencyMs: 0 }))))

    it("rejects a latencyMs that is not an integer from 0 and up, naming it", () => {
      assert.throws(
        () => ScriptedModel.layer({ latencyMs: -1 }),
        "Expected `latencyMs` to be an integer from 0 and up, got `-1`"
      )
      assert.throws(() => ScriptedModel.layer({ latencyMs: 1.5 }), /got `1.5`/)
      assert.throws(() => ScriptedModel.layer({ latencyMs: Number.NaN }), /got `NaN`/)
    })
  })

  describe("streaming", () => {
    it.effect("streams the reply through onText word by word; the chunks join to the reply", () =>
      Effect.gen(function*() {
        const chunks: Array<string> = []
        const reply = yield* replyAfter(
          ScriptedModel.layer(),
          request([user("alpha beta"), user("gamma")], (chunk) => chunks.push(chunk)),
          300
        )
        assert.deepStrictEqual(chunks, ["You ", "said: ", "alpha ", "beta ", "/ ", "gamma"])
        assert.strictEqual(chunks.join(""), reply.text)
      }))

    it.effect("streams over time: the first word arrives before the reply completes", () =>
      Effect.gen(function*() {
        const model = yield* Model
        const chunks: Array<string> = []
        const fiber = yield* Effect.forkChild(
          model.reply(request([user("a b c d e f g h")], (chunk) => chunks.push(chunk)))
        )
        yield* TestClock.adjust(150)
        assert.deepStrictEqual(chunks, [])
        yield* TestClock.adjust(149)
        assert.isAbove(chunks.length, 0)
        assert.isBelow(chunks.length, 10)
        yield* TestClock.adjust(1)
        const reply = yield* Fiber.join(fiber)
        assert.strictEqual(chunks.join(""), reply.text)
      }).pipe(Effect.provide(ScriptedModel.layer())))

    it.effect("a heartbeat reply is streamed once, as HEARTBEAT_OK", () =>
      Effect.gen(function*() {
        const chunks: Array<string> = []
        yield* replyAfter(ScriptedModel.layer(), request([user(DEFAULT_HEARTBEAT_PROMPT)], (c) => chunks.push(c)), 300)
        assert.deepStrictEqual(chunks, [HEARTBEAT_OK])
      }))
  })

  describe("interruption", () => {
    it.effect("interruptible during its latency: no reply and no text after the interrupt", () =>
      Effect.gen(function*() {
        const model = yield* Model
        const chunks: Array<string> = []
        const fiber = yield* Effect.forkChild(model.reply(request([user("stop me")], (c) => chunks.push(c))))
        yield* TestClock.adjust(100)
        yield* Fiber.interrupt(fiber)
        const exit = yield* Fiber.await(fiber)
        assert.isTrue(Exit.hasInterrupts(exit))
        yield* TestClock.adjust(1_000)
        assert.deepStrictEqual(chunks, [])
      }).pipe(Effect.provide(ScriptedModel.layer())))
  })
})
