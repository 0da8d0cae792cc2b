/**
 * `npm run telegram` end to end, against a fake Bot API server the test starts (test/support/fakeTelegram.ts):
 * updates in and replies out, a long reply split in order, a 429 storm, a blocked user, photos and
 * stickers, a SIGKILL in the middle (twice: while a reply is in flight, and right after `send`
 * returned before the offset was stored) with nothing lost or sent twice, a supergroup migration
 * kept across a SIGKILL and a restart (and a torn or wrong `migrated.json` reported, set aside,
 * learned again), and bad tokens.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { splitMessage } from "../../examples/telegram/split.js"
import { removeDir, runChatbot, startChatbot, tempDir, useTempDirs } from "../support/chatbot.js"
import type { Chatbot } from "../support/chatbot.js"
import { FAKE_TOKEN, startFakeTelegram } from "../support/fakeTelegram.js"
import type { FakeTelegram } from "../support/fakeTelegram.js"
import { startServer } from "../support/httpServer.js"

const fresh = useTempDirs()
const SCRIPT = "examples/telegram/main.ts"

const fakes: Array<FakeTelegram> = []
const bots: Array<Chatbot> = []
afterEach(async () => {
  for (const bot of bots.splice(0)) {
    bot.kill("SIGKILL")
    await bot.exited
  }
  for (const fake of fakes.splice(0)) await fake.close()
})

const fake = async () => {
  const f = await startFakeTelegram()
  fakes.push(f)
  return f
}

const env = (f: FakeTelegram, extra: Record<string, string> = {}) => ({
  TELEGRAM_BOT_TOKEN: FAKE_TOKEN,
  TELEGRAM_API_BASE: f.url,
  ...extra
})

/** Starts the bot and waits until it polls. */
const startBot = async (f: FakeTelegram, stateDir: string, extra: Record<string, string> = {}) => {
  const bot = startChatbot(["--state-dir", stateDir, "--offline", "--latency", "0", "--poll-timeout", "1"], {
    script: SCRIPT,
    env: env(f, extra)
  })
  bots.push(bot)
  await bot.waitForStdout(/^switchyard telegram: @fake_switchyard_bot is listening/)
  return bot
}

const stop = async (bot: Chatbot) => {
  bot.kill("SIGTERM")
  const exit = await bot.waitForExit()
  bots.splice(bots.indexOf(bot), 1)
  return exit
}

const kill9 = async (bot: Chatbot) => {
  bot.kill("SIGKILL")
  const exit = await bot.exited
  bots.splice(bots.indexOf(bot), 1)
  expect(exit.signal).toBe("SIGKILL")
}

/** What JSON.parse says of `text` (the bot's child process runs the same Node). */
const parseError = (text: string): string => {
  try {
    JSON.parse(text)
  } catch (error) {
    return (error as Error).message
  }
  throw new Error(`${text} parses`)
}

const texts = (f: FakeTelegram, chat: number) => f.sent.filter((m) => m.chat === String(chat)).map((m) => m.text)

/**
 * One bot for the cases that need no restart (a bot's start is the slow part): each case has chats
 * of its own; the last one stops the bot and reads what the log kept.
 */
describe("npm run telegram: one bot, many chats", () => {
  let f: FakeTelegram
  let bot: Chatbot
  let stateDir: string
  beforeAll(async () => {
    f = await startFakeTelegram()
    stateDir = path.join(tempDir("switchyard-telegram-"), "state")
    bot = startChatbot(["--state-dir", stateDir, "--offline", "--latency", "0", "--poll-timeout", "1"], {
      script: SCRIPT,
      env: env(f)
    })
    await bot.waitForStdout(/^switchyard telegram: @fake_switchyard_bot is listening/)
  })
  afterAll(async () => {
    bot.kill("SIGKILL")
    await bot.exited
    await f.close()
    removeDir(path.dirname(stateDir))
  })

  it("each text message is answered in its chat; the offset confirms them (state.json 0600 in a 0700 folder)", async () => {
    f.pushText(1, "hello")
    f.pushText(2, "hi there")
    await f.until((sent) => (sent.length >= 2 ? true : undefined), "two replies")
    expect(texts(f, 1)).toEqual(["You said: hello"])
    expect(texts(f, 2)).toEqual(["You said: hi there"])
    await f.confirmed()
    await bot.waitForStdout(/^→ 1: You said: hello$/) // printed once Telegram's answer is back
    const telegramDir = path.join(stateDir, "telegram")
    expect(fs.statSync(telegramDir).mode & 0o777).toBe(0o700)
    expect(fs.statSync(path.join(telegramDir, "state.json")).mode & 0o777).toBe(0o600)
    expect(JSON.parse(fs.readFileSync(path.join(telegramDir, "state.json"), "utf8"))).toEqual({
      offset: f.polls.at(-1)
    })
  })

  it("\"typing…\" is shown in the chat while its turn runs, before the reply", async () => {
    f.pushText(21, "are you there?")
    await f.until((sent) => (sent.some((m) => m.chat === "21") ? true : undefined), "the reply")
    const typing = f.actions.filter((a) => a.chat === "21")
    expect(typing.map((a) => a.action)).toEqual(["typing"])
    expect(typing[0]!.at).toBeLessThanOrEqual(f.sent.find((m) => m.chat === "21")!.at)
  })

  it("a reply longer than 4,096 characters is sent as parts of at most 4,096, in order, an emoji never cut", async () => {
    // The reply is "You said: " (10) + the text: its 4,096th code unit is the first half of the emoji.
    const text = "a".repeat(4085) + "😀" + "b".repeat(5000) + "c".repeat(100)
    f.pushText(7, text)
    const reply = `You said: ${text}`
    const parts = await f.until((sent) => {
      const mine = sent.filter((m) => m.chat === "7").map((m) => m.text)
      return mine.join("") === reply ? mine : undefined
    }, "the parts of the long reply")
    expect(parts.map((p) => p.length)).toEqual([4095, 4096, reply.length - 4095 - 4096])
    expect(parts[1]!.startsWith("😀")).toBe(true)
  })

  it("a 429 storm: each retry waits Telegram's retry_after; the reply goes out once", async () => {
    f.storm(3, 1)
    f.pushText(3, "storm")
    await f.until((sent) => (sent.some((m) => m.chat === "3") ? true : undefined), "the reply after the storm")
    const tries = f.attempts.filter((a) => a.chat === "3")
    expect(tries.map((a) => a.answered)).toEqual([429, 429, 429, 200])
    const gaps = tries.slice(1).map((a, i) => a.at - tries[i]!.at)
    for (const gap of gaps) expect(gap).toBeGreaterThanOrEqual(950)
    expect(Math.max(...gaps)).toBeLessThan(2_500) // retry_after, not the longer backoff steps
    expect(texts(f, 3)).toEqual(["You said: storm"])
  })

  it("a user who blocked the bot: one attempt (403 is permanent), one error line, the others are answered", async () => {
    f.block(4)
    f.pushText(4, "are you there?")
    await bot.waitForStderr(
      /^error: the reply \S+ to 4 was not delivered: sendMessage answered 403: Forbidden: bot was blocked by the user; given up: the user blocked the bot/
    )
    f.pushText(5, "me too")
    await f.until((sent) => (sent.some((m) => m.chat === "5") ? true : undefined), "the other chat's reply")
    expect(f.attempts.filter((a) => a.chat === "4").map((a) => a.answered)).toEqual([403])
  })

  it("a group upgraded to a supergroup (400 with migrate_to_chat_id): the reply goes to the new chat at once, said in one line; later replies to the old chat go straight to the new one", async () => {
    f.migrate(-60, -1_000_000_000_060)
    f.pushText(-60, "before the upgrade")
    await bot.waitForStdout(
      /^telegram: chat -60 was upgraded to a supergroup \(-1000000000060\); its replies go to -1000000000060 from now on$/
    )
    await f.until((sent) => (sent.some((m) => m.chat === "-1000000000060") ? true : undefined), "the moved reply")
    f.pushText(-60, "still the old id")
    await f.until(
      (sent) => (sent.filter((m) => m.chat === "-1000000000060").length === 2 ? true : undefined),
      "the second reply in the new chat"
    )
    expect(texts(f, -1_000_000_000_060)).toEqual(["You said: before the upgrade", "You said: still the old id"])
    // One refused attempt in all: the old chat is not tried again.
    expect(f.attempts.filter((a) => a.chat === "-60").map((a) => a.answered)).toEqual([400])
  })

  it("a photo and a sticker get a polite reply; nothing crashes, the next text is answered", async () => {
    f.pushUpdate({
      message: {
        message_id: 1,
        date: 0,
        chat: { id: 6, type: "private" },
        photo: [{ file_id: "x", width: 1, height: 1 }]
      }
    })
    f.pushUpdate({ message: { message_id: 2, date: 0, chat: { id: 6, type: "private" }, sticker: { file_id: "y" } } })
    f.pushUpdate({ edited_message: { message_id: 3, date: 0, chat: { id: 6 }, text: "edited" } })
    f.pushText(6, "and text")
    await f.until((sent) => (sent.filter((m) => m.chat === "6").length >= 3 ? true : undefined), "three replies")
    const replies = texts(f, 6)
    expect(replies).toContain(
      "I can only read text messages for now, so I cannot answer this photo. Please write it as text."
    )
    expect(replies).toContain(
      "I can only read text messages for now, so I cannot answer this sticker. Please write it as text."
    )
    expect(replies).toContain("You said: and text")
    expect(bot.stdout.some((l) => /ignored \(edited_message, not a message\)/.test(l))).toBe(true)
  })

  it("getUpdates failing (502, then 409 Conflict): one line each streak, it polls again and answers", async () => {
    f.failPolls(2, 502)
    await bot.waitForStderr(/getUpdates answered 502/) // the poll held now ends, and the next ones fail
    f.pushText(11, "after the outage")
    await f.until((sent) => (sent.some((m) => m.chat === "11") ? true : undefined), "the reply after the outage")
    f.failPolls(1, 409)
    await bot.waitForStderr(/getUpdates answered 409/)
    f.pushText(11, "after the conflict")
    await f.until(
      (sent) => (sent.filter((m) => m.chat === "11").length >= 2 ? true : undefined),
      "the reply after the conflict"
    )
    expect(bot.stderr.filter((l) => l.includes("getUpdates answered 502"))).toHaveLength(1)
    expect(bot.stderr.filter((l) => l.includes("getUpdates answered 409"))).toEqual([
      expect.stringContaining(
        "(another process polls this bot, or a webhook is set: deleteWebhook); polling again in 1 s"
      )
    ])
    expect(texts(f, 11)).toEqual(["You said: after the outage", "You said: after the conflict"])
  })

  it("SIGTERM: exit 0, bye last, the token never printed; the log holds the blocked user's reply as a dead letter", async () => {
    bot.kill("SIGTERM")
    const exit = await bot.waitForExit()
    expect(exit.code).toBe(0)
    expect(bot.stdout.at(-1)).toMatch(/^bye \(SIGTERM\): /)
    expect([...bot.stdout, ...bot.stderr].join("\n")).not.toContain(FAKE_TOKEN)
    const { bot: list } = await runChatbot(["deliveries", "--state-dir", stateDir, "--json"])
    const report = JSON.parse(list.stdout.join("\n"))
    expect(report.dead).toHaveLength(1)
    expect(report.dead[0]).toMatchObject({ recipient: "telegram:4", attempts: 1 })
    expect(report.dead[0].lastError).toContain("403")
    expect(report.pending).toEqual([])
  })
})

describe("npm run telegram: restarts and bad configuration", () => {
  it("SIGKILL while a reply is in flight, then a restart: every message answered once, no reply sent twice", async () => {
    const f = await fake()
    const stateDir = path.join(fresh(), "state")
    const first = await startBot(f, stateDir)
    const held = f.holdNext()
    f.pushText(8, "one")
    await held // the reply to "one" reached Telegram and was never answered: it is not delivered
    f.pushText(8, "two")
    f.pushText(9, "three")
    await kill9(first)

    const second = await startBot(f, stateDir)
    // The reply was in flight at the kill: the log says it may have gone out, and the bot says it sends it again.
    await second.waitForStdout(
      /^the reply \S+ to 8 may have gone out before the restart; Telegram cannot be asked, so it is sent again$/
    )
    await f.until(
      (
        sent
      ) => (sent.filter((m) => m.chat === "8").map((m) => m.text).join(" ").includes("two") &&
          sent.some((m) => m.chat === "9")
        ? true
        : undefined),
      "every reply"
    )
    await f.confirmed()
    expect((await stop(second)).code).toBe(0)
    // Each user message is in exactly one reply, and no reply went out twice.
    const all = f.sent.map((m) => `${m.chat}:${m.text}`)
    expect(new Set(all).size).toBe(all.length)
    const answered = f.sent.flatMap((m) => m.text.replace(/^You said: /, "").split(" / ").map((t) => `${m.chat}:${t}`))
    expect(answered.sort()).toEqual(["8:one", "8:two", "9:three"])
  })

  it("SIGKILL while part 2 of a long reply is in flight: the restart sends parts 2 and 3 only, each once, in order", async () => {
    const f = await fake()
    const stateDir = path.join(fresh(), "state")
    const first = await startBot(f, stateDir)
    const held = f.holdNext(1) // part 1 is answered, part 2 is held
    const text = "x".repeat(9000)
    f.pushText(12, text)
    await held
    await kill9(first)
    expect(texts(f, 12)).toHaveLength(1)
    const progress = JSON.parse(fs.readFileSync(path.join(stateDir, "telegram", "parts.json"), "utf8"))
    expect(Object.values(progress)).toEqual([1])

    const second = await startBot(f, stateDir)
    await second.waitForStdout(
      /^the reply \S+ to 12 may have gone out before the restart \(1 part\(s\) are known sent\); Telegram cannot be asked/
    )
    const reply = `You said: ${text}`
    const parts = await f.until((sent) => {
      const mine = sent.filter((m) => m.chat === "12").map((m) => m.text)
      return mine.join("").length >= reply.length ? mine : undefined
    }, "the rest of the long reply")
    expect(parts.join("")).toBe(reply)
    expect(parts.map((p) => p.length)).toEqual([4096, 4096, reply.length - 8192])
  })

  it("SIGKILL right after send returned, before the offset was stored: the restart does not send the update again", async () => {
    const f = await fake()
    const stateDir = path.join(fresh(), "state")
    const first = startChatbot(["--state-dir", stateDir, "--offline", "--latency", "0", "--poll-timeout", "1"], {
      script: SCRIPT,
      env: env(f, { SWITCHYARD_TELEGRAM_KILL_AFTER_SEND: "1" })
    })
    bots.push(first)
    await first.waitForStdout(/is listening/)
    f.pushText(10, "only once")
    const exit = await first.exited
    bots.splice(bots.indexOf(first), 1)
    expect(exit.signal).toBe("SIGKILL")
    const state = JSON.parse(fs.readFileSync(path.join(stateDir, "telegram", "state.json"), "utf8"))
    expect(state.batch.updates).toHaveLength(1) // the batch was written down, its offset not stored

    const second = await startBot(f, stateDir)
    await second.waitForStdout(/accepted before the restart, not sent again/)
    await f.until((sent) => (sent.some((m) => m.chat === "10") ? true : undefined), "the reply")
    await f.confirmed()
    expect((await stop(second)).code).toBe(0)
    expect(texts(f, 10)).toEqual(["You said: only once"])
  })

  it("a supergroup migration survives a SIGKILL and a restart: migrated.json (0600) holds it, the old chat is refused once in all, said once", async () => {
    const f = await fake()
    const stateDir = path.join(fresh(), "state")
    const file = path.join(stateDir, "telegram", "migrated.json")
    f.migrate(-61, -1_000_000_000_061)
    const first = await startBot(f, stateDir)
    const held = f.holdNext(1) // the refused call to -61 is answered; the reply sent again to the new chat is held
    f.pushText(-61, "before the restart")
    expect((await held).chat).toBe("-1000000000061")
    await first.waitForStdout(/^telegram: chat -61 was upgraded to a supergroup \(-1000000000061\); its replies go/)
    // written before the reply went to the new chat
    expect(JSON.parse(fs.readFileSync(file, "utf8"))).toEqual({ "-61": "-1000000000061" })
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)
    await kill9(first)

    const second = await startBot(f, stateDir)
    // the reply in flight at the kill is sent again (at least once), straight to the new chat
    await second.waitForStdout(/^the reply \S+ to -61 may have gone out before the restart; Telegram cannot be asked/)
    await f.until((sent) => (sent.some((m) => m.chat === "-1000000000061") ? true : undefined), "the reply sent again")
    f.pushText(-61, "after the restart")
    await f.until(
      (sent) => (sent.some((m) => m.chat === "-1000000000061" && m.text.includes("after")) ? true : undefined),
      "the reply after the restart, in the new chat"
    )
    expect((await stop(second)).code).toBe(0)
    expect(texts(f, -1_000_000_000_061)).toEqual(["You said: before the restart", "You said: after the restart"])
    // the restarted bot went straight to the new chat: one refused attempt across both processes
    expect(f.attempts.filter((a) => a.chat === "-61").map((a) => a.answered)).toEqual([400])
    expect(second.stdout.filter((l) => l.includes("was upgraded to a supergroup"))).toEqual([])
    expect(second.stderr.filter((l) => l.startsWith("error:"))).toEqual([])
  })

  it("a torn migrated.json, then one of the wrong shape: one clear line each, set aside, the bot answers and learns the migration again", async () => {
    const f = await fake()
    const stateDir = path.join(fresh(), "state")
    const file = path.join(stateDir, "telegram", "migrated.json")
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
    const whole = JSON.stringify({ "-62": "-1000000000062" })
    const torn = whole.slice(0, whole.length - 6) // a write cut short
    fs.writeFileSync(file, torn, { mode: 0o600 })
    f.migrate(-62, -1_000_000_000_062)
    const first = await startBot(f, stateDir)
    const line = await first.waitForStderr(/^error: telegram: the chat migrations in /)
    expect(line).toBe(
      `error: telegram: the chat migrations in ${file} cannot be used (cannot read ${file}: ${
        parseError(torn)
      }); the file is kept as ${file}.corrupt; the bot goes on without them, and learns each again from Telegram's next refusal`
    )
    expect(fs.readFileSync(`${file}.corrupt`, "utf8")).toBe(torn)
    f.pushText(-62, "after the torn file")
    f.pushText(64, "another chat")
    await first.waitForStdout(/^telegram: chat -62 was upgraded to a supergroup/)
    await f.until(
      (sent) => (sent.some((m) => m.chat === "-1000000000062") && sent.some((m) => m.chat === "64") ? true : undefined),
      "both replies"
    )
    expect(JSON.parse(fs.readFileSync(file, "utf8"))).toEqual({ "-62": "-1000000000062" })
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)
    expect((await stop(first)).code).toBe(0)

    fs.writeFileSync(file, JSON.stringify({ "-62": -1_000_000_000_062 }), { mode: 0o600 })
    const second = await startBot(f, stateDir)
    expect(await second.waitForStderr(/^error: telegram: the chat migrations in /)).toContain(
      `cannot be used (expected chat id -> chat id, got "-62" -> -1000000000062); the file is kept as ${file}.corrupt`
    )
    f.pushText(-62, "after the wrong shape")
    await f.until(
      (sent) => (sent.filter((m) => m.chat === "-1000000000062").length === 2 ? true : undefined),
      "the reply after the wrong shape"
    )
    expect((await stop(second)).code).toBe(0)
    // learned again once per start that had no usable file
    expect(f.attempts.filter((a) => a.chat === "-62").map((a) => a.answered)).toEqual([400, 400])
    expect(texts(f, 64)).toEqual(["You said: another chat"])
  })

  it("a token revoked while running: one line, the agent shuts down, exit 1, the token never printed", async () => {
    const f = await fake()
    const bot = await startBot(f, path.join(fresh(), "state"))
    f.revoke()
    const exit = await bot.waitForExit()
    bots.splice(bots.indexOf(bot), 1)
    expect(exit.code).toBe(1)
    expect(bot.stderr).toContain("error: Telegram refused the token: getUpdates answered 401: Unauthorized")
    expect([...bot.stdout, ...bot.stderr].join("\n")).not.toContain(FAKE_TOKEN)
  })

  it("a Bot API nobody answers at: one line naming it, exit 1, nothing written", async () => {
    const dir = fresh()
    const closed = await startServer(() => {})
    await closed.close() // its port: nobody listens there now
    const { exit, bot } = await runChatbot(["--state-dir", path.join(dir, "state")], "", {
      script: SCRIPT,
      env: { TELEGRAM_BOT_TOKEN: FAKE_TOKEN, TELEGRAM_API_BASE: closed.url }
    })
    expect(exit.code).toBe(1)
    const port = new URL(closed.url).port
    expect(bot.stderr.filter((l) => l !== "")).toEqual([
      `error: cannot reach the Bot API at ${closed.url}: getMe failed: connect ECONNREFUSED 127.0.0.1:${port}`
    ])
    expect(fs.readdirSync(dir)).toEqual([])
  })

  it.each([
    ["missing", undefined, /^error: TELEGRAM_BOT_TOKEN is not set: create a bot with @BotFather/],
    [
      "malformed",
      "not-a-token-s3cr3t",
      /^error: Expected TELEGRAM_BOT_TOKEN to look like .*, got 18 characters that do not \(not shown\)$/
    ]
  ])("a %s token: one clear line, exit 1, the token never printed", async (_what, token, line) => {
    const { exit, bot } = await runChatbot(["--state-dir", path.join(fresh(), "state")], "", {
      script: SCRIPT,
      env: token === undefined ? {} : { TELEGRAM_BOT_TOKEN: token }
    })
    expect(exit.code).toBe(1)
    expect(bot.stderr.filter((l) => l !== "")).toHaveLength(1)
    expect(bot.stderr[0]).toMatch(line)
    if (token !== undefined) expect([...bot.stdout, ...bot.stderr].join("\n")).not.toContain(token)
  })

  it("a token Telegram refuses (401): one clear line, exit 1, the token never printed, nothing left running", async () => {
    const f = await fake()
    const other = "987654321:AAOtherTokenThatTheServerRefuses_xyz"
    const { exit, bot } = await runChatbot(["--state-dir", path.join(fresh(), "state")], "", {
      script: SCRIPT,
      env: { TELEGRAM_BOT_TOKEN: other, TELEGRAM_API_BASE: f.url }
    })
    expect(exit.code).toBe(1)
    expect(bot.stderr.filter((l) => l !== "")).toEqual([
      "error: Telegram refused TELEGRAM_BOT_TOKEN (getMe answered 401: Unauthorized); check it with @BotFather"
    ])
    expect([...bot.stdout, ...bot.stderr].join("\n")).not.toContain(other)
  })

  it("TELEGRAM_API_BASE that is not http(s): one line, exit 1", async () => {
    const { exit, bot } = await runChatbot([], "", {
      script: SCRIPT,
      env: { TELEGRAM_BOT_TOKEN: FAKE_TOKEN, TELEGRAM_API_BASE: "ftp://x" }
    })
    expect(exit.code).toBe(1)
    expect(bot.stderr.filter((l) => l !== "")).toEqual([
      "error: Expected `TELEGRAM_API_BASE` to be an http or https URL, got `ftp://x`"
    ])
  })
})

describe("splitMessage", () => {
  it("parts of at most 4,096 code units that join back to the text; a surrogate pair is never cut; empty is no parts", () => {
    expect(splitMessage("")).toEqual([])
    expect(splitMessage("x".repeat(4096))).toEqual(["x".repeat(4096)])
    expect(splitMessage("x".repeat(4097)).map((p) => p.length)).toEqual([4096, 1])
    const emojis = "😀".repeat(3000) // 6,000 code units, every boundary at an even index
    const parts = splitMessage(emojis)
    expect(parts.join("")).toBe(emojis)
    expect(parts.map((p) => p.length)).toEqual([4096, 6000 - 4096])
    const odd = "a" + "😀".repeat(3000)
    const oddParts = splitMessage(odd)
    expect(oddParts.map((p) => p.length)).toEqual([4095, 6001 - 4095])
    expect(oddParts.every((p) => !/^[\udc00-\udfff]|[\ud800-\udbff]$/.test(p))).toBe(true)
  })
})
