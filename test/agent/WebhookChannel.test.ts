/**
 * WebhookChannel against a local HTTP server the test starts: what a POST carries, how each answer
 * (200, 400, 409, 429 with Retry-After, 500, a redirect, no answer in time, a dropped connection, a
 * server SIGKILLed mid-request, nobody listening) becomes a delivery or a failure, and what the
 * delivery queue makes of those failures (TestClock for its backoff; the HTTP exchanges are real).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { spawn } from "node:child_process"
import * as net from "node:net"
import { AgentConfigInvalid, WebhookChannel } from "../../src/agent/index.js"
import { DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryEntry } from "../../src/delivery/index.js"
import { makeMemoryLog } from "../delivery/memoryLog.js"
import { answer, startServer } from "../support/httpServer.js"
import type { Handle } from "../support/httpServer.js"

const entry = (id: string, body: unknown = { session: "alice", text: "hi" }, to = "alice"): DeliveryEntry => ({
  id,
  seq: 1,
  message: { channel: "webhook", to, body },
  enqueuedAt: 0,
  attempts: 0,
  status: "pending"
})

/** A server for the test's Scope. */
const server = (handle: Handle) =>
  Effect.acquireRelease(Effect.promise(() => startServer(handle)), (s) => Effect.promise(() => s.close()))

/** A port nobody listens on (bound, then released). */
const freePort = () =>
  new Promise<number>((resolve) => {
    const s = net.createServer()
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as net.AddressInfo
      s.close(() => resolve(port))
    })
  })

describe("WebhookChannel", () => {
  it.effect("POSTs { id, channel, to, body } as JSON with Idempotency-Key: <entry id> and the extra headers; 2xx is delivered", () =>
    Effect.gen(function*() {
      const s = yield* server((req, res) => answer(res, req.path === "/created" ? 204 : 200))
      const channel = WebhookChannel({ url: `${s.url}/hook?token=abc`, headers: { authorization: "Bearer s3cret" } })
      assert.strictEqual(channel.name, "webhook")
      yield* channel.send(entry("e-1", { session: "alice", kind: "user", text: "héllo", messages: 1 }))
      yield* WebhookChannel({ url: `${s.url}/created`, name: "hooks" }).send(entry("e-2"))
      const [first, second] = s.requests
      assert.strictEqual(first.method, "POST")
      assert.strictEqual(first.path, "/hook?token=abc")
      assert.strictEqual(first.headers["idempotency-key"], "e-1")
      assert.strictEqual(first.headers["content-type"], "application/json")
      assert.strictEqual(first.headers.authorization, "Bearer s3cret")
      assert.deepStrictEqual(JSON.parse(first.body), {
        id: "e-1",
        channel: "webhook",
        to: "alice",
        body: { session: "alice", kind: "user", text: "héllo", messages: 1 }
      })
      assert.strictEqual(second.headers["idempotency-key"], "e-2")
      assert.strictEqual(second.headers.authorization, undefined)
    }))

  it.effect("the same entry sent twice carries the same Idempotency-Key (a receiver can drop the duplicate)", () =>
    Effect.gen(function*() {
      const s = yield* server((_req, res) => answer(res, 200))
      const channel = WebhookChannel({ url: s.url })
      yield* channel.send(entry("same"))
      yield* channel.send(entry("same"))
      assert.deepStrictEqual(s.requests.map((r) => r.headers["idempotency-key"]), ["same", "same"])
    }))

  it.effect.each(
    [
      [400, true],
      [401, true],
      [404, true],
      [408, false],
      [409, false],
      [425, false],
      [429, false],
      [500, false],
      [502, false],
      [503, false]
    ] as const
  )(
    "an answer %s fails carrying the status (the default classify: permanent %s); the message names the status and what the server said",
    ([status, permanent]) =>
      Effect.gen(function*() {
        const s = yield* server((_req, res) => answer(res, status, { error: `reason ${status}` }))
        const failure = yield* Effect.flip(WebhookChannel({ url: `${s.url}/hook` }).send(entry("x")))
        assert.strictEqual(failure._tag, "DeliveryFailure")
        assert.strictEqual(failure.status, status)
        assert.strictEqual(failure.permanent, undefined, "the queue's classify decides")
        assert.strictEqual(DeliveryQueue.defaultClassify(failure, entry("x")).permanent, permanent)
        assert.match(
          failure.message,
          new RegExp(`^POST ${s.url}/hook answered ${status} .*: \\{"error":"reason ${status}"\\}$`)
        )
      })
  )

  it.effect("credentials in the URL are sent as Basic authorization; a given Authorization header wins; Content-Type and Idempotency-Key are ours", () =>
    Effect.gen(function*() {
      const s = yield* server((_req, res) => answer(res, 200))
      const url = s.url.replace("http://", "http://us%40er:pa55@") + "/hook"
      yield* WebhookChannel({ url, headers: { "Content-Type": "text/plain", "Idempotency-Key": "mine" } }).send(
        entry("e-1")
      )
      yield* WebhookChannel({ url, headers: { Authorization: "Bearer s3cret" } }).send(entry("e-2"))
      assert.strictEqual(s.requests[0].headers.authorization, `Basic ${Buffer.from("us@er:pa55").toString("base64")}`)
      assert.strictEqual(s.requests[0].headers["content-type"], "application/json")
      assert.strictEqual(s.requests[0].headers["idempotency-key"], "e-1")
      assert.strictEqual(s.requests[1].headers.authorization, "Bearer s3cret")
    }))

  it.effect("a failure message never shows the query string, credentials in the URL, or the headers", () =>
    Effect.gen(function*() {
      const s = yield* server((_req, res) => answer(res, 500))
      const port = yield* Effect.promise(freePort)
      for (const base of [s.url, `http://127.0.0.1:${port}`]) {
        const url = base.replace("http://", "http://user:pa55@") + "/hook?token=t0ken"
        const failure = yield* Effect.flip(
          WebhookChannel({ url, headers: { authorization: "Bearer s3cret" } }).send(entry("x"))
        )
        assert.match(failure.message, new RegExp(`^POST ${base}/hook (answered 500|failed: ECONNREFUSED)`))
        for (const secret of ["pa55", "t0ken", "s3cret", "user"]) assert.notInclude(failure.message, secret)
      }
    }))

  it.effect("429 with Retry-After: 7 carries the header; the message shows it", () =>
    Effect.gen(function*() {
      const s = yield* server((_req, res) => answer(res, 429, { error: "slow down" }, { "retry-after": "7" }))
      const failure = yield* Effect.flip(WebhookChannel({ url: s.url }).send(entry("x")))
      assert.strictEqual(failure.retryAfter, "7")
      assert.strictEqual(failure.retryAfterMs, 7_000)
      assert.deepStrictEqual(DeliveryQueue.defaultClassify(failure, entry("x")), {
        permanent: false,
        retryAfterMs: 7_000
      })
      assert.include(failure.message, "answered 429 Too Many Requests (Retry-After: 7)")
    }))

  it.effect("a redirect is permanent (a webhook is not redirected) and names the Location", () =>
    Effect.gen(function*() {
      const s = yield* server((_req, res) => answer(res, 302, "", { location: "https://elsewhere.example/hook" }))
      const failure = yield* Effect.flip(WebhookChannel({ url: s.url }).send(entry("x")))
      assert.strictEqual(failure.permanent, true)
      assert.include(failure.message, "answered 302 Found")
      assert.include(failure.message, "use the final URL (Location: https://elsewhere.example/hook)")
      assert.lengthOf(s.requests, 1, "not followed")
    }))

  it.effect("no answer within timeoutMs (headers never sent, or a body never finished): aborted, retryable", () =>
    Effect.gen(function*() {
      const s = yield* server((req, res) => {
        if (req.path === "/half") {
          res.writeHead(200, { "content-type": "application/json" })
          res.write("{")
        }
        // otherwise: never answer
      })
      for (const where of ["/silent", "/half"]) {
        const failure = yield* Effect.flip(WebhookChannel({ url: `${s.url}${where}`, timeoutMs: 150 }).send(entry("x")))
        assert.strictEqual(DeliveryQueue.defaultClassify(failure, entry("x")).permanent, false)
        assert.strictEqual(failure.message, `POST ${s.url}${where} failed: no answer within 150 ms`)
      }
    }))

  it.effect("a connection dropped mid-request (socket destroyed) fails retryable, naming the socket error", () =>
    Effect.gen(function*() {
      const s = yield* server((_req, _res, req) => void req.socket.destroy())
      const failure = yield* Effect.flip(WebhookChannel({ url: s.url }).send(entry("x")))
      assert.strictEqual(failure.status, undefined)
      assert.strictEqual(DeliveryQueue.defaultClassify(failure, entry("x")).permanent, false)
      assert.match(failure.message, new RegExp(`^POST ${s.url}/ failed: (UND_ERR_SOCKET|ECONNRESET)`))
      assert.lengthOf(s.requests, 1)
    }))

  it.effect("nobody listening: ECONNREFUSED, retryable", () =>
    Effect.gen(function*() {
      const port = yield* Effect.promise(freePort)
      const failure = yield* Effect.flip(WebhookChannel({ url: `http://127.0.0.1:${port}/hook` }).send(entry("x")))
      assert.strictEqual(failure.status, undefined)
      assert.strictEqual(DeliveryQueue.defaultClassify(failure, entry("x")).permanent, false)
      assert.strictEqual(
        failure.message,
        `POST http://127.0.0.1:${port}/hook failed: ECONNREFUSED (connection refused)`
      )
    }))

  it.live("a server process SIGKILLed while the request is in flight: a retryable connection error", () =>
    Effect.gen(function*() {
      // A real server in its own process that reads the request and never answers.
      const child = spawn(process.execPath, [
        "-e",
        [
          `const s = require("node:http").createServer((q) => { q.resume(); q.on("end", () => process.stdout.write("got\\n")) })`,
          `s.listen(0, "127.0.0.1", () => process.stdout.write(s.address().port + "\\n"))`
        ].join("\n")
      ], { stdio: ["ignore", "pipe", "inherit"] })
      yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGKILL")))
      const exited = new Promise<NodeJS.Signals | null>((resolve) =>
        child.on("exit", (_code, signal) => resolve(signal))
      )
      let out = ""
      const line = (match: RegExp) =>
        new Promise<string>((resolve) => {
          const check = () => {
            const m = out.match(match)
            if (m !== null) {
              child.stdout.off("data", onData)
              resolve(m[1]!)
            }
          }
          const onData = (chunk: Buffer) => {
            out += chunk.toString("utf8")
            check()
          }
          child.stdout.on("data", onData)
          check()
        })
      const port = yield* Effect.promise(() => line(/^(\d+)\n/))
      const sending = yield* Effect.forkChild(
        Effect.flip(WebhookChannel({ url: `http://127.0.0.1:${port}/hook` }).send(entry("x")))
      )
      yield* Effect.promise(() => line(/(got)\n/))
      child.kill("SIGKILL")
      assert.strictEqual(yield* Effect.promise(() => exited), "SIGKILL")
      const failure = yield* Fiber.join(sending)
      assert.strictEqual(DeliveryQueue.defaultClassify(failure, entry("x")).permanent, false)
      assert.match(
        failure.message,
        new RegExp(`^POST http://127.0.0.1:${port}/hook failed: (UND_ERR_SOCKET|ECONNRESET)`)
      )
    }))

  it.effect("a url that is not http(s), or a timeoutMs that is not above 0, throws AgentConfigInvalid naming it", () =>
    Effect.sync(() => {
      const cases: Array<[Parameters<typeof WebhookChannel>[0], string, string]> = [
        [{ url: "ftp://example.com/x" }, "url", "Expected `url` to be an http or https URL, got `ftp://example.com/x`"],
        [{ url: "example.com/hook" }, "url", "Expected `url` to be an http or https URL, got `example.com/hook`"],
        [{ url: "" }, "url", "Expected `url` to be an http or https URL, got ``"],
        [{ url: "http://x", timeoutMs: 0 }, "timeoutMs", "Expected `timeoutMs` to be a number above 0, got `0`"]
      ]
      for (const [options, field, message] of cases) {
        try {
          WebhookChannel(options)
          assert.fail(`accepted ${JSON.stringify(options)}`)
        } catch (error) {
          assert.instanceOf(error, AgentConfigInvalid)
          assert.strictEqual((error as AgentConfigInvalid).field, field)
          assert.strictEqual((error as AgentConfigInvalid).message, message)
        }
      }
    }))
})

describe("WebhookChannel under the delivery queue", () => {
  it.effect("500 is retried after the backoff (TestClock) with the same Idempotency-Key, then delivered and acked", () =>
    Effect.gen(function*() {
      let calls = 0
      const s = yield* server((_req, res) => answer(res, ++calls === 1 ? 500 : 200))
      const log = makeMemoryLog()
      const q = yield* DeliveryQueue.make({
        log,
        deliver: WebhookChannel({ url: s.url }).send,
        backoffMs: [1_000],
        jitter: 0
      })
      const e = yield* q.enqueue({ channel: "webhook", to: "alice", body: { text: "hi" } })
      yield* q.idle
      const attempt = log.calls.find((c) => c.op === "attempt")
      assert.isDefined(attempt)
      assert.include(attempt!.op === "attempt" ? attempt!.error : "", "answered 500")
      assert.strictEqual(attempt!.op === "attempt" ? attempt!.nextAttemptAt : -1, 1_000)
      yield* TestClock.adjust(999)
      yield* q.idle
      assert.lengthOf(s.requests, 1, "not before the backoff")
      yield* TestClock.adjust(1)
      yield* q.idle
      assert.deepStrictEqual(log.acked, [e.id])
      assert.deepStrictEqual(s.requests.map((r) => r.headers["idempotency-key"]), [e.id, e.id])
    }))

  it.effect("400 goes to the dead letters after one attempt; 409 is retried", () =>
    Effect.gen(function*() {
      // /conflict answers 409 to the first request of an entry, 200 after.
      const seen = new Map<string, number>()
      const conflictOnce = (key: unknown) => {
        const n = (seen.get(String(key)) ?? 0) + 1
        seen.set(String(key), n)
        return n === 1 ? 409 : 200
      }
      const s = yield* server((req, res) =>
        answer(res, req.path === "/bad" ? 400 : conflictOnce(req.headers["idempotency-key"]))
      )
      const log = makeMemoryLog()
      const bad = WebhookChannel({ url: `${s.url}/bad` })
      const conflict = WebhookChannel({ url: `${s.url}/conflict` })
      const q = yield* DeliveryQueue.make({
        log,
        deliver: (e) => (e.message.to === "bad" ? bad : conflict).send(e),
        backoffMs: [500],
        jitter: 0
      })
      const dead = yield* q.enqueue({ channel: "webhook", to: "bad", body: 1 })
      const retried = yield* q.enqueue({ channel: "webhook", to: "conflict", body: 2 })
      yield* q.idle
      assert.deepStrictEqual((yield* log.dead).map((d) => d.id), [dead.id])
      assert.include((yield* log.dead)[0].lastError ?? "", "answered 400")
      yield* TestClock.adjust(500)
      yield* q.idle
      assert.deepStrictEqual(log.acked, [retried.id])
      assert.strictEqual(s.requests.filter((r) => r.path === "/bad").length, 1, "a permanent failure is not retried")
      assert.strictEqual(s.requests.filter((r) => r.path === "/conflict").length, 2)
    }))

  it.effect("429 with Retry-After: 7 is attempted again 7 s later, not at the backoff step; a 503 with an HTTP-date Retry-After waits until that date", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(Date.parse("2026-12-01T10:00:00Z"))
      const calls = new Map<string, number>()
      const s = yield* server((req, res) => {
        const n = (calls.get(req.path) ?? 0) + 1
        calls.set(req.path, n)
        if (n > 1) return answer(res, 200)
        if (req.path === "/busy") return answer(res, 429, {}, { "retry-after": "7" })
        answer(res, 503, {}, { "retry-after": "Tue, 01 Dec 2026 10:00:45 GMT" })
      })
      const log = makeMemoryLog()
      const busy = WebhookChannel({ url: `${s.url}/busy` })
      const later = WebhookChannel({ url: `${s.url}/later` })
      const q = yield* DeliveryQueue.make({
        log,
        deliver: (e) => (e.message.to === "busy" ? busy : later).send(e),
        backoffMs: [1_000, 120_000],
        jitter: 0
      })
      const b = yield* q.enqueue({ channel: "webhook", to: "busy", body: 1 })
      const l = yield* q.enqueue({ channel: "webhook", to: "later", body: 2 })
      yield* q.idle
      const start = Date.parse("2026-12-01T10:00:00Z")
      const next = (id: string) =>
        log.calls.flatMap((c) => (c.op === "attempt" && c.id === id ? [c.nextAttemptAt - start] : []))
      assert.deepStrictEqual(next(b.id), [7_000])
      assert.deepStrictEqual(next(l.id), [45_000])
      yield* TestClock.adjust(6_999)
      yield* q.idle
      assert.lengthOf(s.requests, 2, "neither is attempted again early (not at the 1 s backoff step)")
      yield* TestClock.adjust(1)
      yield* q.idle
      assert.deepStrictEqual(log.acked, [b.id])
      yield* TestClock.adjust(38_000)
      yield* q.idle
      assert.deepStrictEqual(log.acked, [b.id, l.id])
    }))
})
