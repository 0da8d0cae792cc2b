/**
 * The chatbot when the model call fails (a local fake of the Anthropic API, or a closed port):
 * one line saying what failed and that the message is kept; the agent retries by itself; `/status`
 * shows what is not answered; `/retry`; at the end of input, exit 3 while messages are unanswered.
 */
import * as net from "node:net"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { runChatbot, startChatbot, useTempDirs } from "../support/chatbot.js"
import * as FakeAnthropic from "../support/fakeAnthropic.js"

const fresh = useTempDirs()
const KEY = "sk-ant-test-failures-0123456789"

/** A port nobody listens on (taken, then released). */
const closedPort = (): Promise<number> =>
  new Promise((resolve) => {
    const server = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })

describe("chatbot: failed model calls", () => {
  it(
    "a permanent failure (401): one line, the message is kept; /status shows it unanswered; /retry answers it",
    async () => {
      const fake = await FakeAnthropic.start()
      try {
        fake.enqueue(FakeAnthropic.error(401, { message: "invalid x-api-key" }))
        const bot = startChatbot(["--state-dir", path.join(fresh(), "state"), "--json"], {
          env: { ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: fake.url }
        })
        await bot.waitForEvent((e) => e.type === "ready", "ready")
        bot.write("hello\n")
        const line = await bot.waitForStderr(/^error: no reply for local:/)
        expect(line).toBe(
          "error: no reply for local: Anthropic API 401 authentication_error: invalid x-api-key; " +
            "1 message is kept and will be answered: when you send another message, or /retry"
        )
        const from = bot.events.length
        bot.write("/status\n")
        const status = await bot.waitForEvent((e) => e.type === "status", "the status", { from })
        expect(status.unanswered).toEqual([
          {
            session: "local",
            messages: 1,
            failure: expect.objectContaining({ retryable: false, attempts: 1, error: expect.stringContaining("401") })
          }
        ])
        expect(status.unanswered[0].failure.retryAt).toBeUndefined()
        bot.write("/retry\n")
        expect(await bot.waitForEvent((e) => e.type === "retry", "the retry")).toEqual({ type: "retry", sessions: 1 })
        const reply = await bot.waitForEvent((e) => e.type === "reply", "the reply")
        expect(reply).toMatchObject({ session: "local", text: "Fake Claude heard: hello", messages: 1 })
        bot.end()
        expect((await bot.waitForExit()).code).toBe(0)
        expect(bot.stderr.join("\n")).not.toContain(KEY)
      } finally {
        await fake.close()
      }
    },
    60_000
  )

  it(
    "a passing failure (529, after the SDK's own retries): the chatbot says it tries again in 1 s, and it does, unasked",
    async () => {
      const fake = await FakeAnthropic.start()
      try {
        // The SDK tries 3 times (maxRetries 2); then the agent's retry after 1 s gets the answer.
        fake.enqueue(FakeAnthropic.error(529), FakeAnthropic.error(529), FakeAnthropic.error(529))
        const bot = startChatbot(["--state-dir", path.join(fresh(), "state"), "--json"], {
          env: { ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: fake.url }
        })
        bot.write("are you there\n")
        const line = await bot.waitForStderr(/^error: no reply for local:/)
        expect(line).toMatch(
          /^error: no reply for local: Anthropic API 529 .*; 1 message is kept and will be answered: trying again in 1 s \(\/retry: now\)$/
        )
        const reply = await bot.waitForEvent((e) => e.type === "reply", "the reply of the automatic retry")
        expect(reply).toMatchObject({ text: "Fake Claude heard: are you there", messages: 1 })
        expect(fake.requests).toHaveLength(4)
        bot.end()
        expect((await bot.waitForExit()).code).toBe(0)
      } finally {
        await fake.close()
      }
    },
    60_000
  )

  it("automatic retries that fail the same way print no new line; /status counts the attempts", async () => {
    const port = await closedPort()
    const bot = startChatbot(["--state-dir", path.join(fresh(), "state"), "--json"], {
      env: { ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: `http://127.0.0.1:${port}` }
    })
    bot.write("anyone?\n")
    await bot.waitForStderr(/^error: no reply for local:/)
    // Ask until the agent has tried again by itself (1 s after the first failure).
    let status
    do {
      const from = bot.events.length
      bot.write("/status\n")
      status = await bot.waitForEvent((e) => e.type === "status", "the status", { from })
    } while ((status.unanswered[0]?.failure?.attempts ?? 0) < 2)
    expect(status.unanswered).toEqual([
      {
        session: "local",
        messages: 1,
        failure: expect.objectContaining({ retryable: true, retryAt: expect.any(Number) })
      }
    ])
    expect(bot.stderr.filter((l) => l.startsWith("error: no reply for local:"))).toHaveLength(1)
    bot.end()
    expect((await bot.waitForExit()).code).toBe(3)
  }, 60_000)

  it("end of input with messages unanswered (no network): the goodbye line says how many, exit 3", async () => {
    const port = await closedPort()
    const { exit, bot } = await runChatbot(["--state-dir", path.join(fresh(), "state")], "one\ntwo\n", {
      env: { ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: `http://127.0.0.1:${port}` }
    })
    expect(exit.code).toBe(3)
    const failed = bot.stderr.filter((l) => l.startsWith("error: no reply for local:"))
    expect(failed.length).toBeGreaterThanOrEqual(1)
    expect(failed[0]).toMatch(
      /cannot reach the Anthropic API at 127\.0\.0\.1:\d+ \(ECONNREFUSED\); (1 message is|2 messages are) kept and will be answered/
    )
    expect(bot.stderr.at(-1)).toMatch(
      /^bye \(eof\): .*; 2 messages not answered \(kept: the next start answers them\)$/
    )
  }, 60_000)
})
