/**
 * The chatbot as a newcomer runs it: a real child process running examples/chatbot/main.ts (`npm run chat`),
 * each test with its own temporary state folder.
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { DeliveryLog } from "../../src/delivery/index.js"
import { readJsonLines, runChatbot, startChatbot, untilMainRuns, useTempDirs } from "../support/chatbot.js"
import * as FakeAnthropic from "../support/fakeAnthropic.js"

const fresh = useTempDirs()

describe("chatbot", () => {
  it("piped lines are answered, and lines that arrive during a turn are answered together (--json)", async () => {
    const dir = fresh()
    const bot = startChatbot(["--state-dir", path.join(dir, "state"), "--json", "--latency", "1500"])
    await bot.waitForEvent((e) => e.type === "ready", "ready")
    // `/status` is handled after `first` was accepted: ask until its turn runs (a barrier, not a sleep).
    bot.write("first\n")
    await untilMainRuns(bot)
    bot.end("second\nthird\nfourth\n")
    const exit = await bot.waitForExit()
    expect(exit.code).toBe(0)
    expect(bot.nonJson).toEqual([])
    const replies = bot.events.filter((e) => e.type === "reply")
    expect(replies.map((r) => [r.session, r.text, r.messages])).toEqual([
      ["local", "You said: first", 1],
      ["local", "You said: second / third / fourth", 3]
    ])
    expect(new Set(replies.map((r) => r.id)).size).toBe(2)
    expect(bot.events[0]).toEqual({ type: "ready" })
    expect(bot.events.at(-1)).toEqual({
      type: "shutdown",
      signal: "eof",
      drain: { completed: expect.any(Number), canceled: 0, timedOut: false },
      pendingDeliveries: 0
    })
  })

  it("/restart <lane> restarts it (the generation goes up), a bad lane is one error line, /quit ends like end of input", async () => {
    const dir = fresh()
    const { exit, bot } = await runChatbot(
      ["--state-dir", path.join(dir, "state"), "--json", "--latency", "10"],
      "/restart main\n/restart nowhere\n/restart heartbeat\nhello\n/quit\nnever read\n"
    )
    expect(exit.code).toBe(0)
    expect(bot.events.filter((e) => e.type === "restart")).toEqual([
      { type: "restart", lane: "main", generation: 1 },
      { type: "restart", lane: "heartbeat", generation: 1 }
    ])
    expect(bot.stderr.filter((l) => l.startsWith("error:"))).toHaveLength(1)
    expect(bot.stderr.find((l) => l.startsWith("error:"))).toContain("nowhere")
    expect(bot.events.filter((e) => e.type === "reply").map((e) => e.text)).toEqual(["You said: hello"])
    expect(bot.events.at(-1)).toMatchObject({ type: "shutdown", signal: "eof" })
  })

  it("--help exits 0 and lists every option and the deliveries command", async () => {
    const { exit, bot } = await runChatbot(["--help"])
    expect(exit.code).toBe(0)
    const help = bot.stdout.join("\n")
    for (
      const option of [
        "--state-dir",
        "--session",
        "--model",
        "--offline",
        "--latency",
        "--heartbeat",
        "--cron",
        "--outbox",
        "--json",
        "--drain-timeout",
        "deliveries"
      ]
    ) {
      expect(help).toContain(option)
    }
  })

  it.each([
    [["--latency", "abc"], "--latency"],
    [["--bogus"], "--bogus"],
    [["--drain-timeout", "-5"], "--drain-timeout"],
    [["--cron", "61 * * * *|hello"], "--cron"],
    [["deliverys"], "deliverys"],
    [["deliveries", "--retry-dead", "now"], "now"]
  ])(
    "a bad option or value (%j) gives one line naming it, a non-zero exit, and nothing written",
    async (args, name) => {
      const dir = fresh()
      const stateDir = path.join(dir, "state")
      const { exit, bot } = await runChatbot(["--state-dir", stateDir, ...args], "hello\n")
      expect(exit.code).not.toBe(0)
      expect(bot.stderr.filter((l) => l !== "")).toHaveLength(1)
      expect(bot.stderr[0]).toContain(name)
      expect(bot.stdout.filter((l) => l !== "")).toEqual([])
      expect(fs.existsSync(stateDir)).toBe(false)
    }
  )

  it("cron and heartbeat turns print their events; HEARTBEAT_OK is suppressed", async () => {
    const dir = fresh()
    const bot = startChatbot([
      "--state-dir",
      path.join(dir, "state"),
      "--json",
      "--latency",
      "20",
      "--heartbeat",
      "200",
      "--cron",
      "*/1 * * * * *|report the weather"
    ])
    const cron = await bot.waitForEvent((e) => e.type === "cron", "a cron event")
    expect(cron).toEqual({ type: "cron", job: "cron-1", id: expect.any(String), text: "You said: report the weather" })
    const heartbeat = await bot.waitForEvent((e) => e.type === "heartbeat", "a heartbeat event")
    expect(heartbeat).toEqual({ type: "heartbeat", suppressed: true })
    bot.end()
    expect((await bot.waitForExit()).code).toBe(0)
    expect(bot.nonJson).toEqual([])
    expect(bot.events.filter((e) => e.type === "reply")).toEqual([])
    expect(bot.events.at(-1)?.type).toBe("shutdown")
  })

  it("--outbox: each delivered reply is one JSON line { id, session, text } in the file, not a reply event", async () => {
    const dir = fresh()
    const outbox = path.join(dir, "outbox.jsonl")
    const bot = startChatbot(["--state-dir", path.join(dir, "state"), "--json", "--latency", "10", "--outbox", outbox])
    await bot.waitForEvent((e) => e.type === "ready", "ready")
    bot.end("hello\n")
    expect((await bot.waitForExit()).code).toBe(0)
    expect(readJsonLines(outbox)).toEqual([{ id: expect.any(String), session: "local", text: "You said: hello" }])
    expect(bot.events.filter((e) => e.type === "reply")).toEqual([])
    expect((fs.statSync(outbox).mode & 0o777).toString(8)).toBe("600")
    // State files 0600, folders 0700.
    const state = path.join(dir, "state")
    const modes = (p: string): Array<string> =>
      fs.readdirSync(p, { withFileTypes: true }).flatMap((d) => {
        const full = path.join(p, d.name)
        const mode = (fs.statSync(full).mode & 0o777).toString(8)
        return d.isDirectory() ? [`${d.name}/:${mode}`, ...modes(full)] : [`${d.name}:${mode}`]
      })
    expect((fs.statSync(state).mode & 0o777).toString(8)).toBe("700")
    for (const entry of modes(state)) expect(entry).toMatch(/\/:700$|:600$/)
  })

  it("deliveries lists pending and dead entries; --retry-dead puts them back; the next start delivers them", async () => {
    const dir = fresh()
    const stateDir = path.join(dir, "state")
    const outbox = path.join(dir, "outbox.jsonl")
    const ids = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const log = yield* DeliveryLog.open({ dir: path.join(stateDir, "deliveries") })
      const body = (text: string) => ({ session: "local", kind: "user", text, messages: 1 })
      const pending = yield* log.append({ channel: "console", to: "local", body: body("left over") })
      const dead = yield* log.append({ channel: "console", to: "local", body: body("gave up") })
      yield* log.deadLetter(dead.id, "channel said no")
      return { pending: pending.id, dead: dead.id }
    })))

    const listed = await runChatbot(["deliveries", "--state-dir", stateDir])
    expect(listed.exit.code).toBe(0)
    const text = listed.bot.stdout.join("\n")
    expect(text).toContain(ids.pending)
    expect(text).toContain(ids.dead)
    expect(text).toContain("channel said no")
    expect(text).toContain("pending 1, dead 1")

    const retried = await runChatbot(["deliveries", "--state-dir", stateDir, "--retry-dead", "--json"])
    expect(retried.exit.code).toBe(0)
    const report = JSON.parse(retried.bot.stdout[0]!)
    expect(report.counts).toEqual({ pending: 2, dead: 0 })
    expect(report.retried).toBe(1)

    const { exit, bot } = await runChatbot(["--state-dir", stateDir, "--json", "--outbox", outbox])
    expect(exit.code).toBe(0)
    expect(readJsonLines(outbox)).toEqual([
      { id: ids.pending, session: "local", text: "left over" },
      { id: ids.dead, session: "local", text: "gave up" }
    ])
    expect(bot.events.at(-1)).toMatchObject({ type: "shutdown", signal: "eof", pendingDeliveries: 0 })
  })

  it("with ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL it talks to that server through the SDK, never printing the key", async () => {
    const fake = await FakeAnthropic.start()
    try {
      const dir = fresh()
      const key = "sk-ant-test-secret-0123456789"
      const { exit, bot } = await runChatbot(
        ["--state-dir", path.join(dir, "state"), "--json", "--model", "claude-test-1"],
        "hello there\n",
        { env: { ANTHROPIC_API_KEY: key, ANTHROPIC_BASE_URL: fake.url } }
      )
      expect(exit.code).toBe(0)
      const reply = bot.events.find((e) => e.type === "reply")
      expect(reply).toMatchObject({ session: "local", text: "Fake Claude heard: hello there", messages: 1 })
      expect(fake.requests).toHaveLength(1)
      expect(fake.requests[0]!.body.model).toBe("claude-test-1")
      const headers = fake.requests[0]!.headers
      expect([headers["x-api-key"], headers.authorization]).toContain(
        headers["x-api-key"] === key ? key : `Bearer ${key}`
      )
      expect([...bot.stdout, ...bot.stderr].join("\n")).not.toContain(key)
    } finally {
      await fake.close()
    }
  })
})
