/**
 * The chatbot as a person uses it: in a real pseudo-terminal (tmux), typing keys and reading the
 * screen. Piped tests cannot see what these see: the echo of what is typed, the prompt, the thinking
 * sign, lines printed over each other.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { useTempDirs } from "../support/chatbot.js"
import { linesOf, startTerminal, statusUntil, terminalSkip } from "../support/terminal.js"
import type { Terminal } from "../support/terminal.js"

const fresh = useTempDirs()
const skip = terminalSkip()
if (skip !== undefined) console.log(`chatbot.terminal.test.ts: ${skip}`)

/** Runs `body` with a chatbot in a terminal; the tmux server is killed afterwards, whatever happened. */
const withTerminal = async (
  args: ReadonlyArray<string>,
  body: (t: Terminal) => Promise<void>,
  size?: { readonly columns: number; readonly rows: number }
) => {
  const t = await startTerminal(["--state-dir", path.join(fresh(), "state"), ...args], size)
  try {
    await body(t)
  } finally {
    await t.close()
  }
}

/** The last line of the screen is the empty prompt. */
const promptLast = (screen: string) => linesOf(screen).at(-1) === "you>"

const ttyIt = skip === undefined ? it : process.env.CI === "true" ? it : it.skip

describe("chatbot in a terminal", () => {
  if (skip !== undefined && process.env.CI === "true") {
    it("runs under CI (a skip is a failure there)", () => {
      throw new Error(skip)
    })
    return
  }

  ttyIt(
    "echoes what is typed after `you> `; a line typed during a turn is shown and answered with the others; the thinking sign goes; warnings stay off the screen, in /status; /help; Ctrl+D exits 0",
    async () => {
      await withTerminal(["--latency", "2500"], async (t) => {
        await t.waitFor(promptLast, "the prompt")
        await t.type("first")
        // Before Enter: the text is on the prompt line.
        await t.waitFor((s) => linesOf(s).at(-1) === "you> first", "`you> first` echoed before Enter")
        await t.keys("Enter")
        await t.waitFor((s) => s.includes("…thinking") && promptLast(s), "the thinking sign above a fresh prompt")
        await t.type("second")
        const typing = await t.waitFor(
          (s) => linesOf(s).at(-1) === "you> second",
          "`you> second` echoed while the turn runs"
        )
        expect(linesOf(typing).at(-2)).toBe("…thinking")
        await t.keys("Enter")
        await t.type("third")
        await t.keys("Enter")
        const done = await t.waitFor(
          (s) => s.includes("bot> You said: second / third") && promptLast(s),
          "the answer to second and third"
        )
        const lines = linesOf(done)
        const at = (line: string) => lines.indexOf(line)
        expect(at("you> first")).toBeGreaterThan(-1)
        expect(at("you> first")).toBeLessThan(at("you> second"))
        expect(at("you> second")).toBeLessThan(at("you> third"))
        expect(at("bot> You said: first")).toBeGreaterThan(at("you> first"))
        expect(at("bot> You said: second / third")).toBeGreaterThan(at("bot> You said: first"))
        // Nothing was printed into the thinking sign, and it is gone; the queue's warning is not on screen.
        expect(done).not.toContain("…thinking")
        expect(done).not.toMatch(/WARN|waited \d+ ms/)

        const status = await statusUntil(t, /^deliveries: pending 0, dead 0, in flight 0, delivered 2$/m)
        expect(status).toMatch(/^lane main: running 0, waiting 0/m)
        // The second turn waited for the first longer than lane main's warnAfterMs (2 s): the warning is here.
        expect(status).toMatch(/^warnings: 1, the last 1 \(--log-level warn prints them as they come\):$/m)
        expect(status).toMatch(/WARN switchyard: task \S+ waited \d+ ms to start in lane `main`/)

        await t.type("/help")
        await t.keys("Enter")
        const help = await t.waitFor((s) => s.includes("/quit ") && promptLast(s), "the help")
        for (const command of ["/help", "/status", "/restart <lane>", "/pause <lane>", "/resume <lane>", "/quit"]) {
          expect(help).toMatch(new RegExp(`^${command.replace(/[/<>]/g, "\\$&")} `, "m"))
        }

        await t.keys("C-d")
        expect(await t.waitForExit()).toEqual({ code: 0, signal: undefined })
        const last = await t.screen()
        expect(last).toMatch(/^bye \(eof\): /m)
      })
    },
    90_000
  )

  ttyIt(
    "a reply that streams as one long line (a 12 KB paste echoed, 130 rows on a 40-row screen) is on screen and in the scrollback once, whole, in order",
    async () => {
      await withTerminal(["--latency", "500"], async (t) => {
        await t.waitFor(promptLast, "the prompt")
        const words = Array.from({ length: 2000 }, (_, i) => `w${i}`)
        const text = words.join(" ")
        await t.type(text)
        await t.keys("Enter")
        const history = await t.waitForHistory(
          (h) => h.includes("bot> You said: ") && h.replace(/\s+/g, "").endsWith("w1999you>"),
          "the whole reply, then the prompt",
          60_000
        )
        // Redrawn whole under every chunk, the live line left a copy in the scrollback per chunk once it
        // was taller than the screen.
        expect(history.split("bot> You said: ").length - 1).toBe(1)
        const reply = history.slice(history.indexOf("bot> You said: "), history.lastIndexOf("\nyou>"))
        expect(linesOf(await t.screen()).at(-1)).toBe("you>")
        // The rows joined give the reply (tmux drops a row's trailing blank, so compare without blanks).
        expect(reply.replace(/\s+/g, "")).toBe(`bot>Yousaid:${words.join("")}`)
        await t.keys("C-d")
        expect((await t.waitForExit()).code).toBe(0)
      }, { rows: 40, columns: 100 })
    },
    90_000
  )

  ttyIt(
    "a paste into the middle of the line is sent as shown; after a paste longer than a row, or TABs up to a row's end, a Backspace draws no row twice",
    async () => {
      await withTerminal(["--latency", "100"], async (t) => {
        await t.waitFor(promptLast, "the prompt")
        // Node 20's readline appended a pasted chunk's characters (but its last) to the end of the line.
        await t.type("hello world")
        await t.keys("Home")
        await t.type(">> ")
        await t.waitFor((s) => linesOf(s).at(-1) === "you> >> hello world", "the paste where the cursor was")
        await t.keys("Enter")
        await t.waitFor((s) => s.includes("bot> You said: >> hello world"), "the line sent as shown")
        await t.waitFor(promptLast, "the prompt again")

        // 100 characters pasted on an 80-column terminal, then Backspace: the redraw starts on the prompt's row.
        await t.type("abcdefghij".repeat(10))
        await t.keys("BSpace")
        const pasted = await t.waitFor(
          (s) => linesOf(s).at(-1) === "fghijabcdefghijabcdefghi",
          "the pasted line, one character less"
        )
        expect(linesOf(pasted).filter((l) => l.startsWith("you> abcdefghij"))).toHaveLength(1)
        await t.keys("C-u")
        await t.waitFor(promptLast, "the line cleared")

        // TABs: `col9` ends 4 columns before the row's end; the TAB after it reaches the next row in readline's count.
        const cells = Array.from({ length: 13 }, (_, i) => `col${i + 1}`)
        await t.type(cells.join("\t") + "\tend")
        await t.keys("BSpace", "BSpace", "BSpace")
        await t.type("XYZ")
        const tabbed = await t.waitFor((s) => /col13\s+XYZ$/.test(linesOf(s).at(-1)!), "the edited line's last row")
        expect(linesOf(tabbed).filter((l) => l.startsWith("you> col1"))).toHaveLength(1)
        expect(linesOf(tabbed).at(-1)!.startsWith("col10")).toBe(true)
        await t.keys("Enter")
        await t.waitForHistory((h) => /You said: col1\s+col2[\s\S]*col13\s+XYZ/.test(h), "the reply, TABs and all")
        await t.keys("C-d")
        expect((await t.waitForExit()).code).toBe(0)
      }, { rows: 24, columns: 80 })
    },
    60_000
  )

  ttyIt(
    "a reply line with tabs (a pasted table echoed) is on screen once, whole: a TAB takes the columns it moves",
    async () => {
      await withTerminal(["--latency", "300"], async (t) => {
        await t.waitFor(promptLast, "the prompt")
        const cells = Array.from({ length: 30 }, (_, i) => `c${i}`)
        for (const cell of cells) {
          await t.type(cell)
          await t.keys("Tab")
        }
        await t.keys("Enter")
        const history = await t.waitForHistory(
          (h) => h.includes("bot> You said: ") && /c29\s*you>\s*$/.test(h),
          "the whole reply, then the prompt"
        )
        // Counted as one column, each TAB made the live line's rows too few to erase: copies of its rows stayed.
        expect(history.split("bot> You said: ").length - 1).toBe(1)
        const reply = history.slice(history.indexOf("bot> You said: "), history.lastIndexOf("\nyou>"))
        expect(reply).not.toContain("\t")
        expect(reply.replace(/\s+/g, "")).toBe(`bot>Yousaid:${cells.join("")}`)
        await t.keys("C-d")
        expect((await t.waitForExit()).code).toBe(0)
      }, { rows: 20, columns: 100 })
    },
    60_000
  )

  ttyIt("commands with a wrong argument are one line each: /quit now, /restart bogus, /nope", async () => {
    await withTerminal(["--latency", "10"], async (t) => {
      await t.waitFor(promptLast, "the prompt")
      for (const line of ["/quit now", "/restart bogus", "/nope"]) {
        await t.type(line)
        await t.keys("Enter")
      }
      const s = await t.waitFor((s) => s.includes("/nope\n") && promptLast(s), "three answers")
      const lines = linesOf(s)
      expect(lines.slice(lines.indexOf("you> /quit now"))).toEqual([
        "you> /quit now",
        "error: /quit takes no argument, got `now` (usage: /quit)",
        "you> /restart bogus",
        "error: unknown lane `bogus`; lanes are main, heartbeat, cron",
        "you> /nope",
        "error: unknown command /nope (/help lists the commands)",
        "you>"
      ])
      await t.type("/quit")
      await t.keys("Enter")
      expect((await t.waitForExit()).code).toBe(0)
    })
  }, 60_000)

  ttyIt(
    "/pause main: a typed message waits (status: paused), /resume main answers it; /limits main 2 5 shows in /status; /help lists the lane commands",
    async () => {
      await withTerminal(["--latency", "10"], async (t) => {
        await t.waitFor(promptLast, "the prompt")
        await t.type("/pause main")
        await t.keys("Enter")
        await t.waitFor((s) => s.includes("lane main paused: running turns go on") && promptLast(s), "the pause")
        await t.type("wait for me")
        await t.keys("Enter")
        const held = await statusUntil(t, /^unanswered: local: 1 message\(s\) accepted/m)
        expect(held).toMatch(
          /^lane main: running 0, waiting 1, keys 1, generation 0, concurrent 4, queued 64, paused$/m
        )
        expect(held).toMatch(
          /^unanswered: local: 1 message\(s\) accepted, waiting: lane main is paused \(\/resume main\)$/m
        )
        expect(await t.screen()).not.toContain("bot> You said: wait for me")
        await t.type("/resume main")
        await t.keys("Enter")
        const answered = await t.waitFor(
          (s) => s.includes("bot> You said: wait for me") && promptLast(s),
          "the answer after /resume"
        )
        const lines = linesOf(answered)
        expect(lines.indexOf("bot> You said: wait for me")).toBeGreaterThan(lines.indexOf("you> /resume main"))
        await t.type("/limits main 2 5")
        await t.keys("Enter")
        await t.waitFor((s) => s.includes("lane main limits: concurrent 2, queued 5") && promptLast(s), "the limits")
        // Asked until the answered turn has ended (running 0): then the line must show the new limits.
        const status = await statusUntil(t, /^lane main: running 0, waiting 0, keys 0,/m)
        expect(status).toMatch(/^lane main: running 0, waiting 0, keys 0, generation 0, concurrent 2, queued 5$/m)
        await t.type("/help")
        await t.keys("Enter")
        const help = await t.waitFor((s) => s.includes("/quit ") && promptLast(s), "the help")
        for (const command of ["/pause <lane>", "/resume <lane>"]) expect(help).toContain(`\n${command} `)
        expect(help).toContain("\n/limits <lane> <concurrent> [queued]\n")
        await t.keys("C-d")
        expect((await t.waitForExit()).code).toBe(0)
      })
    },
    60_000
  )

  ttyIt(
    "a line printed while the thinking sign shows (a lane restart) is a line of its own; the reply comes after it",
    async () => {
      await withTerminal(["--latency", "2000"], async (t) => {
        await t.waitFor(promptLast, "the prompt")
        await t.type("restart me")
        await t.keys("Enter")
        await t.waitFor((s) => s.includes("…thinking"), "the thinking sign")
        await t.type("/restart main")
        await t.keys("Enter")
        const s = await t.waitFor(
          (s) => s.includes("bot> You said: restart me") && promptLast(s),
          "the reply after the restart"
        )
        const lines = linesOf(s)
        expect(lines.indexOf("lane main restarted (generation 1)")).toBeGreaterThan(lines.indexOf("you> /restart main"))
        expect(lines.indexOf("bot> You said: restart me")).toBeGreaterThan(
          lines.indexOf("lane main restarted (generation 1)")
        )
        expect(s).not.toContain("…thinking")
        await t.keys("C-d")
        expect((await t.waitForExit()).code).toBe(0)
      })
    },
    60_000
  )

  ttyIt("Ctrl+C during a turn: the turn finishes and its reply is shown, then exit 0", async () => {
    await withTerminal(["--latency", "2000"], async (t) => {
      await t.waitFor(promptLast, "the prompt")
      await t.type("before the end")
      await t.keys("Enter")
      await t.waitFor((s) => s.includes("…thinking"), "the thinking sign")
      await t.keys("C-c")
      expect(await t.waitForExit()).toEqual({ code: 0, signal: undefined })
      const s = await t.screen()
      const lines = linesOf(s)
      const drain = lines.findIndex((l) => l.startsWith("switchyard chat: SIGINT: finishing the turns in flight"))
      expect(drain).toBeGreaterThan(-1)
      expect(lines.indexOf("bot> You said: before the end")).toBeGreaterThan(drain)
      expect(lines.at(-1)).toMatch(/^bye \(SIGINT\): the drain let 1 turn\(s\) finish/)
      expect(s).not.toContain("…thinking")
    })
  }, 60_000)

  ttyIt(
    "the terminal hangs up during a turn (its window closed): the turn finishes, exit 0, the lock is released; the next start prints its reply",
    async () => {
      const state = path.join(fresh(), "state")
      const t = await startTerminal(["--state-dir", state, "--latency", "1500"])
      try {
        await t.waitFor(promptLast, "the prompt")
        await t.type("answered after the hangup")
        await t.keys("Enter")
        await t.waitFor((s) => s.includes("…thinking"), "the thinking sign")
        await t.hangup()
        // Before: readline's EIO was an unhandled 'error' (a crash, the lock left behind); then, with it
        // handled, Node 20 aborted at exit resetting the dead terminal (SIGABRT / SIGSEGV).
        expect(await t.waitForExit()).toEqual({ code: 0, signal: undefined })
      } finally {
        await t.close()
      }
      expect(fs.existsSync(path.join(state, "deliveries", "LOCK"))).toBe(false)
      await withTerminal(["--state-dir", state], async (again) => {
        // the turn answered before the exit (nothing is recovered); its reply, printed to no terminal,
        // was kept in the log, and this start prints it
        await again.waitFor((s) => s.includes("bot> You said: answered after the hangup"), "the kept reply")
        const status = await statusUntil(again, /^deliveries: pending 0, dead 0, in flight 0, delivered 1$/m)
        expect(status).toMatch(/^unanswered: none$/m)
        expect(status).toMatch(/^warnings: none$/m)
        expect(await again.screen()).not.toContain("recovered")
        await again.keys("C-d")
        expect((await again.waitForExit()).code).toBe(0)
      })
    },
    90_000
  )

  ttyIt("Ctrl+C twice: the second one exits at once, non-zero, without waiting for the turn", async () => {
    await withTerminal(["--latency", "60000"], async (t) => {
      await t.waitFor(promptLast, "the prompt")
      await t.type("never answered here")
      await t.keys("Enter")
      await t.waitFor((s) => s.includes("…thinking"), "the thinking sign")
      await t.keys("C-c")
      await t.waitFor((s) => s.includes("finishing the turns in flight"), "the drain note")
      const pressed = Date.now()
      await t.keys("C-c")
      const exit = await t.waitForExit(10_000)
      expect(Date.now() - pressed).toBeLessThan(10_000)
      expect(exit.code).toBe(130)
      expect(await t.screen()).not.toContain("bot> ")
    })
  }, 60_000)

  ttyIt(
    "a resize while a wrapped line is typed under the thinking sign: the line is drawn once, and no thinking sign is left behind",
    async () => {
      // 6 s turn: the resize and its checks happen while it runs (each step waits on the screen, not a clock).
      await withTerminal(["--latency", "6000"], async (t) => {
        await t.waitFor(promptLast, "the prompt")
        await t.type("a first message")
        await t.keys("Enter")
        await t.waitFor((s) => s.includes("…thinking") && promptLast(s), "the thinking sign")
        const typed = "a line typed during the turn that wraps once narrower"
        await t.type(typed)
        await t.waitFor((s) => linesOf(s).at(-1) === `you> ${typed}`, "the typed line")
        await t.resize(40, 40)
        // At 40 columns `you> ` and the 53 characters take two rows: the first 40 characters, then the rest.
        const first = `you> ${typed}`.slice(0, 40)
        const rest = `you> ${typed}`.slice(40)
        const narrow = await t.waitFor((s) => linesOf(s).at(-1) === rest, "the typed line re-wrapped at 40 columns")
        const lines = linesOf(narrow)
        expect(lines.filter((l) => l === first)).toHaveLength(1)
        expect(lines.at(-2)).toBe(first)
        expect(lines.at(-3)).toBe("…thinking")
        const answered = await t.waitFor((s) => s.includes("bot> You said: a first"), "the reply")
        expect(answered).not.toContain("…thinking")
        expect(linesOf(answered).filter((l) => l === first)).toHaveLength(1)
        expect(linesOf(answered).slice(-2)).toEqual([first, rest])
        await t.keys("C-u", "C-d") // Ctrl+D ends input only on an empty line
        expect((await t.waitForExit()).code).toBe(0)
      })
    },
    60_000
  )
})
