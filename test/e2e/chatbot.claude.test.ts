/**
 * The chatbot talking to "Claude": the real SDK in a child process against the fake Messages API
 * (test/support/fakeAnthropic.ts) through ANTHROPIC_BASE_URL. Failed turns keep their messages;
 * a turn canceled by the drain deadline aborts its HTTP request. And, in a terminal, the chatbot
 * shows that a turn runs and streams the reply.
 */
import { spawn, spawnSync } from "node:child_process"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { ROOT, startChatbot, untilMainRuns, useTempDirs } from "../support/chatbot.js"
import * as FakeAnthropic from "../support/fakeAnthropic.js"
import { nodeArgs } from "../support/node.js"

const fresh = useTempDirs()

const KEY = "sk-ant-test-key-do-not-print-42"

describe("chatbot with Claude (fake Messages API)", () => {
  it("a turn the API refuses is one error line; its message stays accepted and the next turn answers both", async () => {
    const fake = await FakeAnthropic.start()
    try {
      fake.enqueue(FakeAnthropic.error(400, { message: "bad request, try again" }))
      const dir = fresh()
      const bot = startChatbot(["--state-dir", path.join(dir, "state"), "--json"], {
        env: { ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: fake.url }
      })
      await bot.waitForEvent((e) => e.type === "ready", "ready")
      bot.write("first\n")
      await bot.waitForStderr(
        /^error: no reply for local: Anthropic API 400 .*; 1 message is kept and will be answered/
      )
      bot.end("second\n")
      expect((await bot.waitForExit()).code).toBe(0)
      const replies = bot.events.filter((e) => e.type === "reply")
      // One model call saw both messages (the SDK layer joins consecutive user messages).
      expect(replies).toEqual([
        {
          type: "reply",
          session: "local",
          id: expect.any(String),
          text: expect.stringMatching(/^Fake Claude heard: first\s+second$/),
          messages: 2
        }
      ])
      expect(fake.requests).toHaveLength(2)
      expect([...bot.stdout, ...bot.stderr].join("\n")).not.toContain(KEY)
    } finally {
      await fake.close()
    }
  })

  it("a rate-limited try the SDK makes again is one line saying why the reply waits; then the reply", async () => {
    const fake = await FakeAnthropic.start()
    try {
      fake.enqueue(FakeAnthropic.error(429, { headers: { "retry-after-ms": "1500" } }))
      const dir = fresh()
      const bot = startChatbot(["--state-dir", path.join(dir, "state")], {
        env: { ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: fake.url }
      })
      bot.write("hello\n")
      await bot.waitForStderr(/^the model answered 429 \(rate limited\): trying again in 2 s \(retry 1 of 2\)$/)
      await bot.waitForStdout(/Fake Claude heard: hello/)
      bot.end()
      expect((await bot.waitForExit()).code).toBe(0)
      expect(fake.requests).toHaveLength(2)
      expect(bot.stderr.filter((line) => line.startsWith("error:"))).toEqual([])
    } finally {
      await fake.close()
    }
  })

  it("a turn canceled by the drain deadline aborts its HTTP request, and the chatbot exits 0", async () => {
    const fake = await FakeAnthropic.start()
    try {
      fake.enqueue(FakeAnthropic.hang("Thinking about"))
      const dir = fresh()
      const bot = startChatbot(["--state-dir", path.join(dir, "state"), "--json", "--drain-timeout", "300"], {
        env: { ANTHROPIC_API_KEY: KEY, ANTHROPIC_BASE_URL: fake.url }
      })
      await bot.waitForEvent((e) => e.type === "ready", "ready")
      bot.write("hello\n")
      await untilMainRuns(bot)
      await fake.waitForRequests(1)
      bot.kill("SIGTERM")
      expect((await bot.waitForExit()).code).toBe(0)
      await fake.waitForAborts(1)
      expect(bot.events.at(-1)).toMatchObject({
        type: "shutdown",
        signal: "SIGTERM",
        drain: { canceled: 1, timedOut: true }
      })
    } finally {
      await fake.close()
    }
  })

  const hasScript = spawnSync("script", ["--version"]).status === 0

  it.skipIf(!hasScript)("in a terminal it shows that a turn runs and streams the reply", async () => {
    const dir = fresh()
    const command = [
      "node",
      ...nodeArgs("examples/chatbot/main.ts"),
      "--state-dir",
      path.join(dir, "state"),
      "--latency",
      "200"
    ]
      .join(" ")
    // `script` gives the chatbot a pseudo-terminal; the input is typed after the banner.
    const bot = startScript(command)
    await bot.until(/Type a message/)
    bot.type("hello terminal\n")
    await bot.until(/bot> You said: hello terminal/)
    bot.type("/quit\n")
    const code = await bot.exited
    expect(code).toBe(0)
    expect(bot.output()).toContain("…thinking")
  })
})

/** Runs `command` under `script` (a pseudo-terminal) and collects what the terminal shows. */
const startScript = (command: string) => {
  const child = spawn("script", ["-qfec", command, "/dev/null"], {
    cwd: ROOT,
    env: { ...process.env, ANTHROPIC_API_KEY: "" }
  })
  let text = ""
  const listeners = new Set<() => void>()
  child.stdout.on("data", (chunk: Buffer) => {
    text += chunk.toString("utf8")
    for (const l of [...listeners]) l()
  })
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)))
  return {
    type: (input: string) => void child.stdin.write(input),
    output: () => text,
    exited,
    until: (pattern: RegExp) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`timed out waiting for ${pattern}; terminal:\n${text}`)),
          20_000
        )
        const check = () => {
          if (pattern.test(text)) {
            clearTimeout(timer)
            listeners.delete(check)
            resolve()
          }
        }
        listeners.add(check)
        check()
      })
  }
}
