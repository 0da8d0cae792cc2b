/**
 * AnthropicModel against a local fake of the Messages API (test/support/fakeAnthropic.ts):
 * the real SDK, real HTTP, only 127.0.0.1.
 */
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Redacted } from "effect"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { inspect } from "node:util"
import { AnthropicModel } from "../../src/agent/index.js"
import { Model, ModelError, type ModelRequest, type ModelRetry, type TranscriptMessage } from "../../src/agent/Model.js"
import * as FakeAnthropic from "../support/fakeAnthropic.js"

const KEY = "sk-ant-test-0123456789-SECRET-abcdef"

const user = (content: string): TranscriptMessage => ({ role: "user", content })
const assistant = (content: string): TranscriptMessage => ({ role: "assistant", content })

const request = (transcript: ReadonlyArray<TranscriptMessage>, onText?: (chunk: string) => void): ModelRequest => ({
  system: "You are terse.",
  transcript,
  maxTokens: 512,
  ...(onText === undefined ? {} : { onText })
})

/** Runs `f` with a fake server and the Model built on it (maxRetries 0 unless `options` says). */
const withFake = <A, E>(
  options: Partial<AnthropicModel.AnthropicModelOptions>,
  f: (fake: FakeAnthropic.FakeAnthropic, model: Model["Service"]) => Effect.Effect<A, E>
) =>
  Effect.gen(function*() {
    const fake = yield* FakeAnthropic.scoped()
    const layer = AnthropicModel.layer({ apiKey: Redacted.make(KEY), baseURL: fake.url, maxRetries: 0, ...options })
    return yield* Effect.gen(function*() {
      return yield* f(fake, yield* Model)
    }).pipe(Effect.provide(layer))
  })

/** The key a request carried: SDK 1.x sends `Authorization: Bearer <key>`, older ones `x-api-key`. */
const sentKey = (sent: FakeAnthropic.RecordedRequest): string | undefined => {
  const header = sent.headers["x-api-key"] ?? sent.headers.authorization
  return typeof header === "string" ? header.replace(/^Bearer /, "") : undefined
}

/** A port on 127.0.0.1 that nothing listens on. */
const closedPort = () =>
  new Promise<number>((resolve) => {
    const server = http.createServer()
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as AddressInfo
      server.close(() => resolve(port))
    })
  })

describe("AnthropicModel", () => {
  describe("streaming", () => {
    it.live("streamed reply assembled: onText gets each text delta in order, the reply is the whole text", () =>
      withFake({}, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.text("Hello there, friend.", { chunks: ["Hel", "lo there", ", friend."] }))
          const chunks: Array<string> = []
          const reply = yield* model.reply(request([user("hi")], (c) => chunks.push(c)))
          assert.deepStrictEqual(chunks, ["Hel", "lo there", ", friend."])
          assert.strictEqual(reply.text, "Hello there, friend.")
          assert.strictEqual(reply.stopReason, "end_turn")
          assert.deepStrictEqual(reply.usage, { inputTokens: 10, outputTokens: 3 })
          assert.strictEqual(fake.requests[0]!.body.stream, true)
        })))

    it.live("sends the model (default claude-sonnet-5-5), system, max_tokens, messages and the key header", () =>
      withFake({}, (fake, model) =>
        Effect.gen(function*() {
          yield* model.reply(request([user("hi")]))
          const [sent] = fake.requests
          assert.strictEqual(sent!.body.model, AnthropicModel.DEFAULT_MODEL)
          assert.strictEqual(AnthropicModel.DEFAULT_MODEL, "claude-sonnet-5-5")
          assert.strictEqual(sent!.body.system, "You are terse.")
          assert.strictEqual(sent!.body.max_tokens, 512)
          assert.deepStrictEqual(sent!.body.messages, [{ role: "user", content: "hi" }])
          assert.strictEqual(sentKey(sent!), KEY)
          assert.isString(sent!.headers["anthropic-version"])
        })))

    it.live("model option is sent; the layer's maxTokens caps the request's", () =>
      withFake({ model: "claude-haiku-5-5", maxTokens: 100 }, (fake, model) =>
        Effect.gen(function*() {
          yield* model.reply(request([user("a")]))
          yield* model.reply({ ...request([user("b")]), maxTokens: 50 })
          assert.strictEqual(fake.requests[0]!.body.model, "claude-haiku-5-5")
          assert.strictEqual(fake.requests[0]!.body.max_tokens, 100)
          assert.strictEqual(fake.requests[1]!.body.max_tokens, 50)
        })))

    it.live("non-stream path: stream false sends one request without streaming and calls onText once", () =>
      withFake({ stream: false }, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.text("all at once"))
          const chunks: Array<string> = []
          const reply = yield* model.reply(request([user("hi")], (c) => chunks.push(c)))
          assert.strictEqual(fake.requests[0]!.body.stream, false)
          assert.deepStrictEqual(chunks, ["all at once"])
          assert.strictEqual(reply.text, "all at once")
          assert.strictEqual(reply.stopReason, "end_turn")
        })))

    it.live("a stream that breaks off before message_stop (ended or socket destroyed) is a retryable network error", () =>
      withFake({}, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.cut("half a rep", false), FakeAnthropic.cut("half a rep", true))
          const clean = yield* Effect.flip(model.reply(request([user("hi")])))
          assert.strictEqual(clean.reason, "network")
          assert.isTrue(clean.retryable)
          assert.include(clean.message, "before message_stop")
          const destroyed = yield* Effect.flip(model.reply(request([user("hi")])))
          assert.strictEqual(destroyed.reason, "network")
          assert.isTrue(destroyed.retryable)
          assert.include(destroyed.message, "before message_stop")
        })))

    it.live("an error event inside the stream is mapped by its type (overloaded_error -> overloaded)", () =>
      withFake({}, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.streamError("overloaded_error", "Overloaded", "partial "))
          const err = yield* Effect.flip(model.reply(request([user("hi")])))
          assert.strictEqual(err.reason, "overloaded")
          assert.isTrue(err.retryable)
          assert.include(err.message, "overloaded_error")
        })))

    it.live("onText that throws is a defect, not a ModelError", () =>
      withFake({}, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.text("boom"))
          const exit = yield* Effect.exit(model.reply(request([user("hi")], () => {
            throw new Error("callback bug")
          })))
          assert.isTrue(Exit.isFailure(exit) && Cause.hasDies(exit.cause))
        })))
  })

  describe("transcript", () => {
    it("merges consecutive same-role messages, drops empty ones, and puts a user message first", () => {
      const messages = AnthropicModel.toMessages([
        assistant("I pinged you earlier."),
        user("what?"),
        user(""),
        user("hello?"),
        assistant("Yes."),
        assistant("Anything else?"),
        user("no")
      ])
      assert.deepStrictEqual(messages, [
        { role: "user", content: AnthropicModel.CONTINUATION_PROMPT },
        { role: "assistant", content: "I pinged you earlier." },
        { role: "user", content: "what?\n\nhello?" },
        { role: "assistant", content: "Yes.\n\nAnything else?" },
        { role: "user", content: "no" }
      ])
    })

    it.live("a transcript with no message is invalid-request and sends nothing", () =>
      withFake({}, (fake, model) =>
        Effect.gen(function*() {
          const err = yield* Effect.flip(model.reply(request([])))
          assert.strictEqual(err.reason, "invalid-request")
          assert.isFalse(err.retryable)
          assert.strictEqual(fake.requests.length, 0)
        })))
  })

  describe("error mapping", () => {
    const cases: ReadonlyArray<readonly [number, ModelError["reason"], boolean]> = [
      [401, "auth", false],
      [403, "auth", false],
      [429, "rate-limit", true],
      [529, "overloaded", true],
      [503, "overloaded", true],
      [500, "unknown", true],
      [408, "timeout", true],
      [504, "timeout", true],
      [400, "invalid-request", false],
      [404, "invalid-request", false],
      [413, "invalid-request", false],
      [422, "invalid-request", false],
      [402, "unknown", false]
    ]
    for (const [status, reason, retryable] of cases) {
      it.live(`${status} maps to ${reason} (retryable ${retryable})`, () =>
        withFake({}, (fake, model) =>
          Effect.gen(function*() {
            fake.enqueue(FakeAnthropic.error(status, { message: `fake says ${status}` }))
            const err = yield* Effect.flip(model.reply(request([user("hi")])))
            assert.instanceOf(err, ModelError)
            assert.strictEqual(err._tag, "ModelError")
            assert.strictEqual(err.reason, reason)
            assert.strictEqual(err.retryable, retryable)
            assert.include(err.message, String(status))
            assert.include(err.message, `fake says ${status}`)
            assert.strictEqual(fake.requests.length, 1)
          })))
    }

    it.live("429 with retry-after is rate-limit, not retried when maxRetries is 0", () =>
      withFake({}, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.rateLimited(30))
          const err = yield* Effect.flip(model.reply(request([user("hi")])))
          assert.strictEqual(err.reason, "rate-limit")
          assert.isTrue(err.retryable)
          assert.strictEqual(fake.requests.length, 1)
        })))

    it.live("maxRetries retries a 529 then succeeds", () =>
      withFake({ maxRetries: 2 }, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.overloaded(), FakeAnthropic.overloaded(), FakeAnthropic.text("made it"))
          const reply = yield* model.reply(request([user("hi")]))
          assert.strictEqual(reply.text, "made it")
          assert.strictEqual(fake.requests.length, 3)
        })))

    it.live("maxRetries exhausted: the last failure is the ModelError", () =>
      withFake({ maxRetries: 1 }, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.overloaded(), FakeAnthropic.rateLimited(0), FakeAnthropic.text("too late"))
          const err = yield* Effect.flip(model.reply(request([user("hi")])))
          assert.strictEqual(err.reason, "rate-limit")
          assert.strictEqual(fake.requests.length, 2)
        })))

    it.live("401 is not retried even with maxRetries", () =>
      withFake({ maxRetries: 2 }, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.error(401, { message: "invalid x-api-key" }))
          const err = yield* Effect.flip(model.reply(request([user("hi")])))
          assert.strictEqual(err.reason, "auth")
          assert.strictEqual(fake.requests.length, 1)
        })))

    it.live("connection refused maps to network (retryable), naming the host, not the key", () =>
      Effect.gen(function*() {
        const port = yield* Effect.promise(closedPort)
        const layer = AnthropicModel.layer({ apiKey: KEY, baseURL: `http://127.0.0.1:${port}`, maxRetries: 0 })
        const err = yield* Effect.flip(
          Effect.gen(function*() {
            return yield* (yield* Model).reply(request([user("hi")]))
          }).pipe(Effect.provide(layer))
        )
        assert.strictEqual(err.reason, "network")
        assert.isTrue(err.retryable)
        assert.include(err.message, `127.0.0.1:${port}`)
        assert.include(err.message, "ECONNREFUSED")
        assert.notInclude(err.message, KEY)
      }))
  })

  describe("retries told to onRetry", () => {
    /** A request whose `onRetry` calls are kept in `seen`. */
    const watched = (seen: Array<ModelRetry>): ModelRequest => ({
      ...request([user("hi")]),
      onRetry: (retry) => seen.push(retry)
    })

    for (const stream of [true, false]) {
      it.live(`each failed try the SDK makes again is told, with its status and retry-after (stream: ${stream})`, () =>
        withFake({ maxRetries: 2, stream }, (fake, model) =>
          Effect.gen(function*() {
            fake.enqueue(
              FakeAnthropic.error(429, { headers: { "retry-after-ms": "5" } }),
              FakeAnthropic.overloaded(),
              FakeAnthropic.text("made it")
            )
            const seen: Array<ModelRetry> = []
            const reply = yield* model.reply(watched(seen))
            assert.strictEqual(reply.text, "made it")
            assert.deepStrictEqual(seen, [
              { reason: "rate-limit", status: 429, retryInMs: 5, retry: 1, maxRetries: 2 },
              { reason: "overloaded", status: 529, retryInMs: 1, retry: 2, maxRetries: 2 }
            ])
          })))
    }

    it.live("a retry-after in seconds: the wait the server asked for, in ms", () =>
      withFake({ maxRetries: 2 }, (fake, model) =>
        Effect.gen(function*() {
          // `retry-after: 0` is no wait the SDK can use (it backs off by itself): no retryInMs
          fake.enqueue(
            FakeAnthropic.error(429, { headers: { "retry-after": "0.02" } }),
            FakeAnthropic.rateLimited(0),
            FakeAnthropic.text("made it")
          )
          const seen: Array<ModelRetry> = []
          yield* model.reply(watched(seen))
          assert.deepStrictEqual(seen, [
            { reason: "rate-limit", status: 429, retryInMs: 20, retry: 1, maxRetries: 2 },
            { reason: "rate-limit", status: 429, retry: 2, maxRetries: 2 }
          ])
        })))

    it.live("the last failure is the ModelError, not a retry; none told when maxRetries is 0 or the error is final", () =>
      Effect.gen(function*() {
        const seen: Array<ModelRetry> = []
        yield* withFake({ maxRetries: 1 }, (fake, model) =>
          Effect.gen(function*() {
            fake.enqueue(FakeAnthropic.overloaded(), FakeAnthropic.overloaded())
            const err = yield* Effect.flip(model.reply(watched(seen)))
            assert.strictEqual(err.reason, "overloaded")
            assert.strictEqual(fake.requests.length, 2)
          }))
        assert.deepStrictEqual(seen.map((r) => r.retry), [1])
        seen.length = 0
        yield* withFake({ maxRetries: 0 }, (fake, model) =>
          Effect.gen(function*() {
            fake.enqueue(FakeAnthropic.overloaded())
            assert.strictEqual((yield* Effect.flip(model.reply(watched(seen)))).reason, "overloaded")
          }))
        yield* withFake({ maxRetries: 2 }, (fake, model) =>
          Effect.gen(function*() {
            fake.enqueue(FakeAnthropic.error(401, { message: "invalid x-api-key" }))
            assert.strictEqual((yield* Effect.flip(model.reply(watched(seen)))).reason, "auth")
          }))
        assert.deepStrictEqual(seen, [])
      }))

    it.live("a connection that fails is a network retry, with no status", () =>
      Effect.gen(function*() {
        const port = yield* Effect.promise(closedPort)
        const layer = AnthropicModel.layer({ apiKey: KEY, baseURL: `http://127.0.0.1:${port}`, maxRetries: 1 })
        const seen: Array<ModelRetry> = []
        const err = yield* Effect.flip(
          Effect.gen(function*() {
            return yield* (yield* Model).reply(watched(seen))
          }).pipe(Effect.provide(layer))
        )
        assert.strictEqual(err.reason, "network")
        assert.deepStrictEqual(seen, [{ reason: "network", retry: 1, maxRetries: 1 }])
      }))

    it.live("an onRetry that throws is a defect, and no retry is sent", () =>
      withFake({ maxRetries: 2 }, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.overloaded(), FakeAnthropic.text("not asked"))
          const exit = yield* Effect.exit(model.reply({
            ...request([user("hi")]),
            onRetry: () => {
              throw new Error("callback bug")
            }
          }))
          assert.isTrue(Exit.isFailure(exit) && Cause.hasDies(exit.cause))
          assert.strictEqual(fake.requests.length, 1)
        })))

    it.live("interrupted during the wait: the retry was told, no more after", () =>
      withFake({ maxRetries: 2 }, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.error(529, { headers: { "retry-after-ms": "600000" } }))
          const seen: Array<ModelRetry> = []
          let told!: () => void
          const first = new Promise<void>((resolve) => {
            told = resolve
          })
          const fiber = yield* Effect.forkChild(model.reply({
            ...request([user("hi")]),
            onRetry: (retry) => {
              seen.push(retry)
              told()
            }
          }))
          yield* Effect.promise(() => first)
          yield* Fiber.interrupt(fiber)
          assert.deepStrictEqual(seen, [{
            reason: "overloaded",
            status: 529,
            retryInMs: 600000,
            retry: 1,
            maxRetries: 2
          }])
          assert.strictEqual(fake.requests.length, 1)
        })))
  })

  describe("the API key", () => {
    it.live("401 -> auth and the key appears nowhere: error, message, String, JSON, Cause pretty print", () =>
      withFake({}, (fake, model) =>
        Effect.gen(function*() {
          // The worst case: the server echoes the key back in its error message.
          fake.enqueue(FakeAnthropic.error(401, { message: `invalid x-api-key: ${KEY}` }))
          const exit = yield* Effect.exit(model.reply(request([user("hi")])))
          assert.isTrue(Exit.isFailure(exit))
          if (!Exit.isFailure(exit)) return
          const err = Cause.squash(exit.cause) as ModelError
          assert.strictEqual(err.reason, "auth")
          assert.isFalse(err.retryable)
          assert.strictEqual(sentKey(fake.requests[0]!), KEY) // it was sent, so it could leak
          const renderings = [
            err.message,
            String(err),
            JSON.stringify(err),
            inspect(err, { depth: 10 }),
            err.stack ?? "",
            Cause.pretty(exit.cause),
            JSON.stringify(exit)
          ]
          for (const rendering of renderings) assert.notInclude(rendering, KEY)
          assert.include(err.message, "<redacted>")
        })))

    it.live("the layer and the service print without the key (String, JSON, inspect)", () =>
      Effect.gen(function*() {
        const fake = yield* FakeAnthropic.scoped()
        for (const apiKey of [KEY, Redacted.make(KEY)]) {
          const options = { apiKey, baseURL: fake.url }
          const layer = AnthropicModel.layer(options)
          const service = yield* Effect.gen(function*() {
            return yield* Model
          }).pipe(Effect.provide(layer))
          for (const value of [layer, service] as Array<unknown>) {
            assert.notInclude(String(value), KEY)
            assert.notInclude(JSON.stringify(value) ?? "", KEY)
            assert.notInclude(inspect(value, { depth: 10, showHidden: true }), KEY)
          }
        }
      }))

    it("invalid options throw a TypeError naming the option; the key is never shown", () => {
      assert.throws(
        () => AnthropicModel.layer({ apiKey: "  " }),
        "Expected `apiKey` to be a non-empty string (its value is not shown)"
      )
      assert.throws(
        () => AnthropicModel.layer({ apiKey: KEY, maxRetries: -1 }),
        "Expected `maxRetries` to be an integer from 0 and up, got `-1` (number)"
      )
      assert.throws(
        () => AnthropicModel.layer({ apiKey: KEY, maxTokens: 0 }),
        "Expected `maxTokens` to be an integer from 1 and up, got `0` (number)"
      )
      assert.throws(
        () => AnthropicModel.layer({ apiKey: KEY, baseURL: "not a url" }),
        "Expected `baseURL` to be a URL, got `not a url` (string)"
      )
      assert.throws(() => AnthropicModel.layer({ apiKey: KEY, model: "" }), /Expected `model` to be a non-empty string/)
    })
  })

  describe("interruption", () => {
    it.live("interrupted turn aborts the request mid-stream: the server sees the connection closed", () =>
      withFake({}, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.hang("partial "))
          let gotChunk!: (chunk: string) => void
          const firstChunk = new Promise<string>((resolve) => {
            gotChunk = resolve
          })
          const fiber = yield* Effect.forkChild(model.reply(request([user("hi")], (c) => gotChunk(c))))
          assert.strictEqual(yield* Effect.promise(() => firstChunk), "partial ")
          yield* Fiber.interrupt(fiber)
          const aborted = yield* Effect.promise(() => fake.waitForAborts(1))
          assert.strictEqual(aborted.length, 1)
          assert.isTrue(fake.requests[0]!.aborted)
          assert.isTrue(Exit.hasInterrupts(yield* Fiber.await(fiber)))
        })))

    it.live("interrupted turn aborts the request before the response starts", () =>
      withFake({}, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(FakeAnthropic.hang())
          const fiber = yield* Effect.forkChild(model.reply(request([user("hi")])))
          yield* Effect.promise(() => fake.waitForRequests(1))
          yield* Fiber.interrupt(fiber)
          yield* Effect.promise(() => fake.waitForAborts(1))
          assert.isTrue(fake.requests[0]!.aborted)
        })))
    it.live("interrupted turn during a retry wait sends no retry", () =>
      withFake({ maxRetries: 1 }, (fake, model) =>
        Effect.gen(function*() {
          fake.enqueue(
            FakeAnthropic.error(529, { headers: { "retry-after-ms": "600000" } }),
            FakeAnthropic.text("probe reply")
          )
          const fiber = yield* Effect.forkChild(model.reply(request([user("first")])))
          yield* Effect.promise(() => fake.waitForRequests(1))
          yield* Fiber.interrupt(fiber)
          // Had the abort only cut the wait short, the retry would reach the server before this probe.
          const reply = yield* model.reply(request([user("probe")]))
          assert.strictEqual(reply.text, "probe reply")
          assert.deepStrictEqual(fake.requests.map((r) => FakeAnthropic.lastUserText(r.body)), ["first", "probe"])
        })))
  })

  describe("base URL", () => {
    it.live("baseURL honoured: requests go to the given server", () =>
      withFake({}, (fake, model) =>
        Effect.gen(function*() {
          const reply = yield* model.reply(request([user("where am I")]))
          assert.strictEqual(reply.text, "Fake Claude heard: where am I")
          assert.strictEqual(fake.requests[0]!.path, "/v1/messages")
        })))

    it.live("ANTHROPIC_BASE_URL env honoured when baseURL is not given", () =>
      Effect.gen(function*() {
        const fake = yield* FakeAnthropic.scoped()
        const before = process.env["ANTHROPIC_BASE_URL"]
        yield* Effect.acquireRelease(
          Effect.sync(() => {
            process.env["ANTHROPIC_BASE_URL"] = fake.url
          }),
          () =>
            Effect.sync(() => {
              if (before === undefined) delete process.env["ANTHROPIC_BASE_URL"]
              else process.env["ANTHROPIC_BASE_URL"] = before
            })
        )
        const layer = AnthropicModel.layer({ apiKey: KEY, maxRetries: 0 })
        const reply = yield* Effect.gen(function*() {
          return yield* (yield* Model).reply(request([user("env")]))
        }).pipe(
          Effect.provide(layer)
        )
        assert.strictEqual(reply.text, "Fake Claude heard: env")
        assert.strictEqual(fake.requests.length, 1)
      }))
  })
})
