/**
 * The chatbot's command line as a newcomer meets it: bad state paths, a failing delivery, the
 * version, commands with wrong arguments, the lane commands (`/pause`, `/resume`, `/limits`), the
 * logs, and `npm run --silent chat -- --json`.
 */
import { execFile, spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { readJsonLines, ROOT, runChatbot, startChatbot, untilMainRuns, useTempDirs } from "../support/chatbot.js"

const fresh = useTempDirs()
const version = (JSON.parse(fs.readFileSync(path.join(ROOT, "package.json"), "utf8")) as { version: string }).version

/** Every file and folder under `dir` (empty when it does not exist). */
const tree = (dir: string): Array<string> =>
  fs.existsSync(dir) ? fs.readdirSync(dir, { recursive: true, encoding: "utf8" }).sort() : []

describe("chatbot command line", () => {
  it("--version prints the package's version and exits 0", async () => {
    const { exit, bot } = await runChatbot(["--version"])
    expect(exit.code).toBe(0)
    expect(bot.stdout.filter((l) => l !== "")).toEqual([version])
  })

  it("--state-dir /proc/forbidden: one line naming the path and the cause, exit 1 before start-up, nothing else printed or made", async () => {
    // Checked before anything starts: no banner, no retry, no warning. (How fast that is is not a unit
    // test's question: wall time on a shared machine is noise.)
    const { exit, bot } = await runChatbot(["--state-dir", "/proc/forbidden"], "hello\n")
    expect(exit.code).toBe(1)
    expect(bot.stderr.filter((l) => l !== "")).toEqual([
      "error: --state-dir /proc/forbidden: cannot create /proc/forbidden: ENOENT (the file system of /proc does not take new folders)"
    ])
    expect(bot.stdout.filter((l) => l !== "")).toEqual([]) // no banner
    expect(fs.existsSync("/proc/forbidden")).toBe(false)
  })

  it.each([
    [
      "a state folder under a file",
      (d: string) => ["--state-dir", path.join(d, "file", "state")],
      "ENOTDIR",
      "is a file, not a folder"
    ],
    [
      "a state folder that is a file",
      (d: string) => ["--state-dir", path.join(d, "file")],
      "ENOTDIR",
      "is a file, not a folder"
    ],
    [
      "an outbox that is a folder",
      (d: string) => ["--state-dir", path.join(d, "state"), "--outbox", d],
      "EISDIR",
      "is a folder, not a file"
    ],
    [
      "an outbox under /proc",
      (d: string) => ["--state-dir", path.join(d, "state"), "--outbox", "/proc/x/out.jsonl"],
      "ENOENT",
      "does not take new folders"
    ]
  ])("%s: one line with the path and the cause, exit 1, no banner, nothing written", async (_what, args, code, why) => {
    const dir = fresh()
    fs.writeFileSync(path.join(dir, "file"), "")
    const argv = args(dir)
    const { exit, bot } = await runChatbot(argv, "hello\n")
    expect(exit.code).toBe(1)
    const lines = bot.stderr.filter((l) => l !== "")
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(new RegExp(`^error: --(state-dir|outbox) \\S+: .*: ${code} \\(.*${why}\\)$`))
    expect(lines[0]).toContain(argv.at(-1)!)
    expect(bot.stdout.filter((l) => l !== "")).toEqual([])
    expect(tree(dir)).toEqual(["file"])
  })

  it("--outbox inside a --state-dir that does not exist yet: both are made (folders 0700, outbox 0600) and the reply goes to the outbox", async () => {
    const dir = fresh()
    const stateDir = path.join(dir, "state")
    const outbox = path.join(stateDir, "out", "replies.jsonl")
    const { exit, bot } = await runChatbot(
      ["--state-dir", stateDir, "--json", "--latency", "10", "--outbox", outbox],
      "hello\n"
    )
    expect(bot.stderr.filter((l) => l !== "")).toEqual([])
    expect(exit.code).toBe(0)
    expect(readJsonLines(outbox)).toEqual([{ id: expect.any(String), session: "local", text: "You said: hello" }])
    expect(fs.statSync(path.join(stateDir, "out")).mode & 0o777).toBe(0o700)
    expect(fs.statSync(outbox).mode & 0o777).toBe(0o600)
  })

  it.runIf(process.getuid?.() === 0)(
    "a read-only file system (a real ro tmpfs): EROFS, exit 1, nothing written",
    async () => {
      const dir = fresh()
      const mnt = path.join(dir, "ro")
      fs.mkdirSync(mnt)
      expect(spawnSync("mount", ["-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", mnt]).status).toBe(0)
      try {
        const { exit, bot } = await runChatbot(["--state-dir", path.join(mnt, "state")], "hello\n")
        expect(exit.code).toBe(1)
        expect(bot.stderr.filter((l) => l !== "")).toEqual([
          `error: --state-dir ${path.join(mnt, "state")}: cannot create ${
            path.join(mnt, "state")
          }: EROFS (read-only file system)`
        ])
      } finally {
        spawnSync("umount", [mnt])
      }
    }
  )

  it("--outbox /dev/full: the failed delivery is one line with the reason; the reply stays in the log", async () => {
    const dir = fresh()
    const stateDir = path.join(dir, "state")
    const { exit, bot } = await runChatbot(
      ["--state-dir", stateDir, "--latency", "10", "--outbox", "/dev/full"],
      "hello\n"
    )
    expect(exit.code).toBe(0)
    const failed = bot.stderr.filter((l) => l.includes("not delivered"))
    expect(failed).toHaveLength(1)
    expect(failed[0]).toMatch(
      /^error: the reply \S+ to local was not delivered: append to \/dev\/full failed: ENOSPC.*; it stays in the delivery log/
    )
    expect(bot.stderr.at(-1)).toMatch(/1 delivery\(ies\) left for the next start$/)
    const listed = await runChatbot(["deliveries", "--state-dir", stateDir])
    expect(listed.bot.stdout.join("\n")).toMatch(/attempts 1 {2}last error: append to \/dev\/full failed: ENOSPC/)
  })

  it("/quit with an argument is an error line and does not quit; /help lists the commands", async () => {
    const dir = fresh()
    const { exit, bot } = await runChatbot(
      ["--state-dir", path.join(dir, "state"), "--latency", "10"],
      "/quit now\n/help\nhello\n/quit\n"
    )
    expect(exit.code).toBe(0)
    expect(bot.stderr.filter((l) => l.startsWith("error:"))).toEqual([
      "error: /quit takes no argument, got `now` (usage: /quit)"
    ])
    const out = bot.stdout.join("\n")
    for (const command of ["/help", "/status", "/restart <lane>", "/pause <lane>", "/resume <lane>", "/quit"]) {
      expect(out).toContain(`${command} `)
    }
    expect(bot.stdout).toContain("/limits <lane> <concurrent> [queued]")
    expect(bot.stdout).toContain("bot> You said: hello")
  })

  it("/pause main holds a message (status: paused, waiting 1), /resume main answers it, /limits main 2 5 sets the limits; each bad argument is one line", async () => {
    const dir = fresh()
    const { exit, bot } = await runChatbot(
      ["--state-dir", path.join(dir, "state"), "--json", "--latency", "10"],
      [
        "/pause main",
        "held",
        "/status",
        "/pause nowhere",
        "/resume",
        "/limits main x",
        "/limits main 2 -1",
        "/limits main 0",
        "/limits main",
        "/limits bogus 1",
        "/resume main",
        "/limits main 2 5",
        "/status",
        ""
      ].join("\n")
    )
    expect(exit.code).toBe(0)
    const types = bot.events.map((e) => e.type)
    const [held, after] = bot.events.filter((e) => e.type === "status")
    const lane = (status: any, name: string) => status.lanes.find((l: any) => l.lane === name)
    expect(lane(held, "main")).toMatchObject({ paused: true, running: 0, waiting: 1 })
    expect(held.unanswered).toEqual([{ session: "local", messages: 1 }])
    expect(bot.events.find((e) => e.type === "pause")).toEqual({ type: "pause", lane: "main", wasPaused: false })
    expect(bot.events.find((e) => e.type === "resume")).toEqual({
      type: "resume",
      lane: "main",
      wasPaused: true,
      waiting: 1
    })
    // Nothing was answered while main was paused.
    expect(types.indexOf("reply")).toBeGreaterThan(types.indexOf("resume"))
    expect(bot.events.find((e) => e.type === "limits")).toEqual({
      type: "limits",
      lane: "main",
      concurrent: 2,
      queued: 5
    })
    expect(lane(after, "main")).toMatchObject({ paused: false, concurrent: 2, queued: 5 })
    expect(bot.events.filter((e) => e.type === "reply").map((e) => e.text)).toEqual(["You said: held"])
    expect(bot.stderr.filter((l) => /^(error|usage):/.test(l))).toEqual([
      "error: unknown lane `nowhere`; lanes are main, heartbeat, cron",
      "usage: /resume <lane> (lanes are main, heartbeat, cron)",
      "error: <concurrent> must be a whole number, got `x` (usage: /limits <lane> <concurrent> [queued])",
      "error: <queued> must be a whole number, got `-1` (usage: /limits <lane> <concurrent> [queued])",
      "error: Expected `limits.concurrent` to be an integer from 1 and up, got `0`",
      "usage: /limits <lane> <concurrent> [queued] (lane main has concurrent 4, queued 64)",
      "error: unknown lane `bogus`; lanes are main, heartbeat, cron"
    ])
  })

  it(
    "--log-level none: the queue's warning is not printed, /status counts it; by default (no terminal) it is printed",
    async () => {
      // The two levels are two chatbots of their own (own state folders), run side by side: each waits
      // out a 2.3 s turn twice, and nothing of one is seen by the other.
      await Promise.all((["none", undefined] as const).map(async (level) => {
        const dir = fresh()
        const bot = startChatbot([
          "--state-dir",
          path.join(dir, "state"),
          "--json",
          "--latency",
          "2300",
          ...(level === undefined ? [] : ["--log-level", level])
        ])
        bot.write("first\n")
        await untilMainRuns(bot)
        bot.write("second\n") // waits for the first turn longer than lane main's warnAfterMs (2 s)
        await bot.waitForEvent((e) => e.type === "reply" && e.messages === 1, "the first reply")
        const status = await untilWarned(bot)
        expect(status.warnings).toBe(1)
        bot.end()
        expect((await bot.waitForExit()).code).toBe(0)
        const warned = bot.stderr.filter((l) => /^WARN switchyard: task \S+ waited \d+ ms/.test(l))
        expect(warned).toHaveLength(level === "none" ? 0 : 1)
      }))
    },
    60_000
  )

  it("`npm run --silent chat -- --json`: standard output has only JSON lines", async () => {
    const dir = fresh()
    const child = execFile("npm", [
      "run",
      "--silent",
      "chat",
      "--",
      "--json",
      "--latency",
      "10",
      "--state-dir",
      path.join(dir, "state")
    ], {
      cwd: ROOT,
      env: { ...process.env, ANTHROPIC_API_KEY: "" }
    })
    child.stdin!.end("hi\n")
    const out: Array<string> = []
    child.stdout!.on("data", (chunk) => out.push(String(chunk)))
    const code = await new Promise<number | null>((resolve) => child.on("close", resolve))
    expect(code).toBe(0)
    const lines = out.join("").split("\n").filter((l) => l !== "")
    expect(lines.map((l) => JSON.parse(l).type)).toEqual(["ready", "reply", "shutdown"])
  }, 30_000)

  it(
    "SIGTERM to `npm run chat`'s own pid (what a supervisor or `kill $!` sends) reaches the chatbot: it drains, prints its shutdown line and npm exits 0, no chatbot left behind",
    async () => {
      const dir = path.join(fresh(), "state")
      // npm forwards the signal to its script's process: with a shell in between (`sh -c node ...`, dash does not
      // exec), the shell died of it and the chatbot went on running, orphaned, npm exiting 143 (seen in tmux).
      const child = spawn("npm", ["run", "--silent", "chat", "--", "--json", "--state-dir", dir], {
        cwd: ROOT,
        env: { ...process.env, ANTHROPIC_API_KEY: "" },
        stdio: ["pipe", "pipe", "pipe"]
      })
      const closed = new Promise<number | null>((resolve) => child.on("close", resolve))
      let out = ""
      let wake = () => {}
      child.stdout!.on("data", (chunk) => {
        out += String(chunk)
        wake()
      })
      const seen = (type: string) =>
        new Promise<void>((resolve) => {
          const check = () => {
            if (out.split("\n").some((l) => l.startsWith(`{"type":"${type}"`))) resolve()
          }
          wake = check
          check()
        })
      await seen("ready")
      child.stdin!.write("hi\n")
      await seen("reply")
      child.kill("SIGTERM")
      const code = await closed
      const left = spawnSync("pgrep", ["-f", `chatbot/main.ts.*${dir}`], { encoding: "utf8" }).stdout.trim()
      if (left !== "") spawnSync("kill", ["-9", ...left.split("\n")])
      expect({ code, left }).toEqual({ code: 0, left: "" })
      const types = out.split("\n").filter((l) => l !== "").map((l) => (JSON.parse(l) as { type: string }).type)
      expect(types).toEqual(["ready", "reply", "shutdown"])
    },
    30_000
  )
})

/** Asks `/status` until it counts a warning (the warning is logged when the waiting turn starts). */
const untilWarned = async (bot: ReturnType<typeof startChatbot>) => {
  while (true) {
    const from = bot.events.length
    bot.write("/status\n")
    const status = await bot.waitForEvent((e) => e.type === "status", "a status event", { from })
    if (status.warnings > 0) return status
  }
}
