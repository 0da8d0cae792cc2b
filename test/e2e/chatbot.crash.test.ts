/**
 * The chatbot under signals: SIGTERM drains and exits 0, a second signal exits at once, and after
 * SIGKILL the next start answers and delivers everything that was accepted (at least once, by a
 * stable id). Real child processes, each test with its own state folder.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { readJsonLines, runChatbot, startChatbot, untilMainRuns, useTempDirs, waitForFile } from "../support/chatbot.js"

const fresh = useTempDirs()

/** "You said: a / b" -> ["a", "b"] */
const answered = (text: string): Array<string> => text.replace(/^You said: /, "").split(" / ")

describe("chatbot under signals", () => {
  it("SIGTERM in the middle of a turn: the reply is still delivered, then the shutdown event, exit 0", async () => {
    const dir = fresh()
    const bot = startChatbot(["--state-dir", path.join(dir, "state"), "--json", "--latency", "1500"])
    await bot.waitForEvent((e) => e.type === "ready", "ready")
    bot.write("hello\n")
    await untilMainRuns(bot)
    bot.kill("SIGTERM")
    const exit = await bot.waitForExit()
    expect(exit).toEqual({ code: 0, signal: null })
    expect(bot.nonJson).toEqual([])
    const types = bot.events.map((e) => e.type).filter((t) => t !== "status")
    expect(types).toEqual(["ready", "reply", "shutdown"])
    expect(bot.events.find((e) => e.type === "reply")).toMatchObject({ text: "You said: hello", messages: 1 })
    expect(bot.events.at(-1)).toEqual({
      type: "shutdown",
      signal: "SIGTERM",
      drain: { completed: 1, canceled: 0, timedOut: false },
      pendingDeliveries: 0
    })
  })

  it("SIGINT drains the same way and reports it", async () => {
    const dir = fresh()
    const bot = startChatbot(["--state-dir", path.join(dir, "state"), "--json", "--latency", "800"])
    await bot.waitForEvent((e) => e.type === "ready", "ready")
    bot.write("hi\n")
    await untilMainRuns(bot)
    bot.kill("SIGINT")
    expect((await bot.waitForExit()).code).toBe(0)
    expect(bot.events.find((e) => e.type === "reply")).toMatchObject({ text: "You said: hi" })
    expect(bot.events.at(-1)).toMatchObject({ type: "shutdown", signal: "SIGINT" })
  })

  it("a second signal during the drain exits at once, non-zero; the next start answers what was accepted", async () => {
    const dir = fresh()
    const stateDir = path.join(dir, "state")
    const outbox = path.join(dir, "outbox.jsonl")
    const bot = startChatbot(["--state-dir", stateDir, "--json", "--latency", "5000", "--outbox", outbox])
    await bot.waitForEvent((e) => e.type === "ready", "ready")
    bot.write("slow one\n")
    await untilMainRuns(bot)
    bot.kill("SIGTERM")
    await bot.waitForStderr(/SIGTERM: finishing the turns in flight/)
    bot.kill("SIGTERM")
    const exit = await bot.waitForExit()
    expect(exit.code).toBe(143)
    expect(bot.events.some((e) => e.type === "shutdown")).toBe(false)
    expect(readJsonLines(outbox)).toEqual([])

    const next = await runChatbot(["--state-dir", stateDir, "--json", "--latency", "10", "--outbox", outbox])
    expect(next.exit.code).toBe(0)
    expect(readJsonLines(outbox)).toEqual([{ id: expect.any(String), session: "local", text: "You said: slow one" }])
  })

  it("a turn past --drain-timeout is canceled (reported), exit 0, and its message is answered on the next start", async () => {
    const dir = fresh()
    const stateDir = path.join(dir, "state")
    const outbox = path.join(dir, "outbox.jsonl")
    const bot = startChatbot([
      "--state-dir",
      stateDir,
      "--json",
      "--latency",
      "20000",
      "--drain-timeout",
      "300",
      "--outbox",
      outbox
    ])
    await bot.waitForEvent((e) => e.type === "ready", "ready")
    bot.write("too slow\n")
    await untilMainRuns(bot)
    bot.kill("SIGTERM")
    expect((await bot.waitForExit()).code).toBe(0)
    expect(bot.events.at(-1)).toEqual({
      type: "shutdown",
      signal: "SIGTERM",
      drain: { completed: 0, canceled: 1, timedOut: true },
      pendingDeliveries: 0
    })
    const next = await runChatbot(["--state-dir", stateDir, "--json", "--latency", "10", "--outbox", outbox])
    expect(next.exit.code).toBe(0)
    expect(readJsonLines(outbox).map((r) => r.text)).toEqual(["You said: too slow"])
  })

  it("SIGKILL under load, twice, then a restart: every accepted message is answered exactly once (duplicates only by id)", async () => {
    const dir = fresh()
    const stateDir = path.join(dir, "state")
    const outbox = path.join(dir, "outbox.jsonl")
    const args = [
      "--state-dir",
      stateDir,
      "--json",
      "--latency",
      "600",
      "--outbox",
      outbox,
      "--heartbeat",
      "50",
      "--cron",
      "*/1 * * * * *|cron tick"
    ]
    const lines = (prefix: string) => Array.from({ length: 10 }, (_, i) => `${prefix}${i + 1}`)

    // Run 1: ten messages accepted (the status barrier), killed while their turns run.
    const first = startChatbot(args)
    await first.waitForEvent((e) => e.type === "ready", "ready")
    first.write(lines("a").join("\n") + "\n")
    await untilMainRuns(first)
    first.kill("SIGKILL")
    expect((await first.waitForExit()).signal).toBe("SIGKILL")
    // The kill came while accepted messages were unanswered: they are on disk, not in the outbox.
    const journal = JSON.parse(fs.readFileSync(path.join(stateDir, "sessions", "local.json"), "utf8"))
    expect(journal.pending.length).toBeGreaterThan(0)

    // Run 2: what run 1 left is answered at start; ten more are accepted; killed after a delivery.
    const second = startChatbot(args)
    await second.waitForEvent((e) => e.type === "ready", "ready")
    second.write(lines("b").join("\n") + "\n")
    await untilMainRuns(second)
    const seen = readJsonLines(outbox).length
    await waitForFile(outbox, (rows) => (rows.length > seen ? rows : undefined))
    second.kill("SIGKILL")
    expect((await second.waitForExit()).signal).toBe("SIGKILL")

    // Run 3: no input; everything left is answered and delivered, then a clean exit.
    const third = await runChatbot(args.slice(0, 7))
    expect(third.exit.code).toBe(0)
    expect(third.bot.events.at(-1)).toMatchObject({ type: "shutdown", signal: "eof", pendingDeliveries: 0 })

    const rows = readJsonLines(outbox)
    const textById = new Map<string, string>()
    for (const row of rows) {
      const before = textById.get(row.id)
      if (before !== undefined) expect(row.text).toBe(before) // a duplicate delivery carries the same id and text
      textById.set(row.id, row.text)
    }
    const answers = new Map<string, Array<string>>()
    for (const [id, text] of textById) {
      if (!text.startsWith("You said: ") || text === "You said: cron tick") continue
      for (const message of answered(text)) answers.set(message, [...(answers.get(message) ?? []), id])
    }
    for (const message of [...lines("a"), ...lines("b")]) {
      expect(answers.get(message), `answers of ${message}`).toHaveLength(1)
    }
    expect([...answers.keys()].sort()).toEqual([...lines("a"), ...lines("b")].sort())
  })
})
