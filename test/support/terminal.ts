/**
 * The chatbot in a real pseudo-terminal: tmux runs it in a detached pane (its own server, on its
 * own socket), the test types with `send-keys` and reads the screen with `capture-pane`. Waits
 * poll the screen until it shows what is expected, with a deadline; none is a sleep that hopes.
 *
 * The program runs under recordExit.mjs, which writes its exit code to a file (tmux may leave it a
 * zombie without a status for long on a loaded machine).
 *
 * Where tmux is missing, `terminalSkip()` says so in one line (and under `CI=true` a skip fails).
 */
import { execFile, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { DEFAULT_WAIT_MS, ROOT } from "./chatbot.js"
import { nodeArgs } from "./node.js"

const run = promisify(execFile)

/** Why the terminal tests cannot run here (`undefined`: they can). */
export const terminalSkip = (): string | undefined => {
  const probe = spawnSync("tmux", ["-V"], { encoding: "utf8" })
  return probe.status === 0 ? undefined : "tmux is not installed: the chatbot's pseudo-terminal tests are skipped"
}

/** How the program in the pane ended. */
export interface PaneExit {
  readonly code: number | undefined
  readonly signal: string | undefined
}

export interface Terminal {
  /** Types `text` as is (no Enter). */
  readonly type: (text: string) => Promise<void>
  /** Sends named keys: `Enter`, `C-c`, `C-d`, ... */
  readonly keys: (...keys: ReadonlyArray<string>) => Promise<void>
  /** The screen now, its lines without trailing blanks, and the blank lines at the end dropped. */
  readonly screen: () => Promise<string>
  /** What scrolled off the top and the screen now, as `screen` gives its lines. */
  readonly history: () => Promise<string>
  /** Polls `history` until `check` holds; fails at the deadline with the last screen. */
  readonly waitForHistory: (check: (history: string) => boolean, what: string, timeoutMs?: number) => Promise<string>
  /** Polls the screen until `check` holds; fails at the deadline with the last screen. */
  readonly waitFor: (check: (screen: string) => boolean, what: string, timeoutMs?: number) => Promise<string>
  /** Resizes the terminal (the program gets SIGWINCH; tmux re-wraps what is on screen). */
  readonly resize: (columns: number, rows: number) => Promise<void>
  /** Waits until the program exits (the pane stays, dead, so its last screen can be read). */
  readonly waitForExit: (timeoutMs?: number) => Promise<PaneExit>
  /**
   * The terminal hangs up, as when its window is closed or its SSH session drops: the tmux server is
   * killed, so the pane's pseudo-terminal goes away under the program (reads and writes fail with EIO).
   * `waitForExit` still works after it (recordExit.mjs stays to record how the program ended).
   */
  readonly hangup: () => Promise<void>
  /** Kills the tmux server (and with it the program, if it still runs) and removes its files. */
  readonly close: () => Promise<void>
}

const quote = (arg: string) => `'${arg.replaceAll("'", `'\\''`)}'`

/**
 * Starts examples/chatbot/main.ts `...args` (with `nodeArgs`, see node.ts) in a pane of `columns` x `rows`,
 * from the repository root, without the Anthropic variables of the test's environment.
 */
export const startTerminal = async (
  args: ReadonlyArray<string>,
  options?: { readonly columns?: number; readonly rows?: number }
): Promise<Terminal> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-tty-"))
  const socket = path.join(dir, "tmux.sock")
  const config = path.join(dir, "tmux.conf")
  fs.writeFileSync(config, "set -g remain-on-exit on\nset -g status off\nset -g history-limit 2000\n")
  const env: NodeJS.ProcessEnv = { ...process.env, TERM: process.env.TERM ?? "xterm" }
  delete env.ANTHROPIC_API_KEY
  delete env.ANTHROPIC_BASE_URL
  delete env.NODE_OPTIONS
  delete env.TMUX
  const tmux = (...argv: ReadonlyArray<string>) => run("tmux", ["-S", socket, ...argv], { env, encoding: "utf8" })
  const exitFile = path.join(dir, "exit.json")
  const recorder = path.join(ROOT, "test", "support", "recordExit.mjs")
  const command = [
    process.execPath,
    recorder,
    exitFile,
    process.execPath,
    ...nodeArgs("examples/chatbot/main.ts"),
    ...args
  ]
    .map(quote)
    .join(" ")
  await tmux(
    "-f",
    config,
    "new-session",
    "-d",
    "-s",
    "chat",
    "-x",
    String(options?.columns ?? 100),
    "-y",
    String(options?.rows ?? 40),
    "-c",
    ROOT,
    command
  )

  const capture = async (...range: ReadonlyArray<string>) => {
    const { stdout } = await tmux("capture-pane", "-p", ...range, "-t", "chat")
    // tmux's own last line under a dead pane ("Pane is dead (status 0, <date>)") is not the program's.
    return stdout.split("\n").map((line) => line.trimEnd()).filter((line) => !line.startsWith("Pane is dead (")).join(
      "\n"
    ).trimEnd()
  }
  const screen = () => capture()

  const poll = async <A>(check: () => Promise<A | undefined>, what: string, timeoutMs: number): Promise<A> => {
    const deadline = Date.now() + timeoutMs
    while (true) {
      const value = await check()
      if (value !== undefined) return value
      if (Date.now() > deadline) {
        throw new Error(
          `timed out after ${timeoutMs} ms waiting for ${what}; the screen:\n${await screen().catch(String)}`
        )
      }
      await new Promise((resolve) => setTimeout(resolve, 40))
    }
  }

  return {
    type: async (text) => void (await tmux("send-keys", "-t", "chat", "-l", text)),
    keys: async (...keys) => void (await tmux("send-keys", "-t", "chat", ...keys)),
    screen,
    history: () => capture("-S", "-"),
    waitForHistory: (check, what, timeoutMs = DEFAULT_WAIT_MS) =>
      poll(
        async () => {
          const now = await capture("-S", "-")
          return check(now) ? now : undefined
        },
        what,
        timeoutMs
      ),
    resize: async (columns, rows) =>
      void (await tmux("resize-window", "-t", "chat", "-x", String(columns), "-y", String(rows))),
    waitFor: (check, what, timeoutMs = DEFAULT_WAIT_MS) =>
      poll(
        async () => {
          const now = await screen()
          return check(now) ? now : undefined
        },
        what,
        timeoutMs
      ),
    waitForExit: (timeoutMs = DEFAULT_WAIT_MS) =>
      poll(
        async () => {
          if (!fs.existsSync(exitFile)) return undefined
          const { code, signal } = JSON.parse(fs.readFileSync(exitFile, "utf8")) as {
            code: number | null
            signal: string | null
          }
          return { code: code ?? undefined, signal: signal ?? undefined }
        },
        "the program to exit",
        timeoutMs
      ),
    hangup: async () => void (await tmux("kill-server")),
    close: async () => {
      await tmux("kill-server").catch(() => undefined)
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
}

/**
 * Types `/status` until its answer matches `pattern` (a barrier: turns end and replies are delivered
 * a moment after they show), returning that answer (the lines from `lane main:` to the prompt).
 */
export const statusUntil = async (t: Terminal, pattern: RegExp): Promise<string> => {
  while (true) {
    const before = (await t.screen()).split("\n").filter((l) => l === "you> /status").length
    await t.type("/status")
    await t.keys("Enter")
    const s = await t.waitFor(
      (s) =>
        s.split("\n").filter((l) => l === "you> /status").length > before &&
        /^warnings: /m.test(s.slice(s.lastIndexOf("you> /status\n"))) && s.endsWith("\nyou>"),
      "the answer to /status"
    )
    const answer = s.slice(s.lastIndexOf("you> /status\n") + "you> /status\n".length)
    if (pattern.test(answer)) return answer
  }
}

/** The screen's lines. */
export const linesOf = (screen: string): Array<string> => screen.split("\n")
