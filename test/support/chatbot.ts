/**
 * A child-process harness for the chatbot's end-to-end tests: runs examples/chatbot/main.ts (what
 * `npm run chat` runs; compiled once per test run, see `nodeArgs` in node.ts) in a child `node`
 * from the repository root, collects its output
 * line by line, and resolves waits when a matching line arrives (event-driven, with a generous
 * overall deadline), never after a hopeful sleep.
 */
import { spawn } from "node:child_process"
import type { ChildProcessWithoutNullStreams } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterEach } from "vitest"
import { nodeArgs } from "./node.js"

/** The repository root. */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")

/** How long a wait may take before it fails the test (generous: the machine is shared). */
export const DEFAULT_WAIT_MS = 20_000

/** A JSON event the chatbot printed with `--json`. */
export type ChatEvent = { readonly type: string } & Record<string, any>

/** How a child ended. */
export interface ChildExit {
  readonly code: number | null
  readonly signal: NodeJS.Signals | null
}

/** A running chatbot. */
export interface Chatbot {
  readonly child: ChildProcessWithoutNullStreams
  readonly stdout: Array<string>
  readonly stderr: Array<string>
  /** The stdout lines parsed as JSON (every stdout line must be JSON in `--json` mode; see `nonJson`). */
  readonly events: Array<ChatEvent>
  /** stdout lines that were not JSON. */
  readonly nonJson: Array<string>
  readonly write: (text: string) => void
  readonly end: (text?: string) => void
  /** Resolves with the first event (past or future, from index `from` on) matching `match`. */
  readonly waitForEvent: (
    match: (event: ChatEvent) => boolean,
    what?: string,
    options?: { readonly timeoutMs?: number; readonly from?: number }
  ) => Promise<ChatEvent>
  /** Resolves with the first stderr line (past or future) matching `pattern`. */
  readonly waitForStderr: (pattern: RegExp, timeoutMs?: number) => Promise<string>
  /** Resolves with the first stdout line (past or future) matching `pattern`. */
  readonly waitForStdout: (pattern: RegExp, timeoutMs?: number) => Promise<string>
  /** Resolves when the child has exited. */
  readonly exited: Promise<ChildExit>
  /** Waits for the exit (failing after the deadline, killing the child). */
  readonly waitForExit: (timeoutMs?: number) => Promise<ChildExit>
  readonly kill: (signal: NodeJS.Signals) => void
}

/** A fresh temporary folder (the test removes it with `removeDir`). */
export const tempDir = (prefix = "switchyard-chat-"): string => fs.mkdtempSync(path.join(os.tmpdir(), prefix))

/** Removes a folder made by `tempDir`. */
export const removeDir = (dir: string): void => fs.rmSync(dir, { recursive: true, force: true })

/** A fresh temp folder per call, each removed after the test that made it (registers an `afterEach`). */
export const useTempDirs = (): () => string => {
  const dirs: Array<string> = []
  afterEach(() => {
    for (const dir of dirs.splice(0)) removeDir(dir)
  })
  return () => {
    const dir = tempDir()
    dirs.push(dir)
    return dir
  }
}

/** The environment of a child: no Anthropic key unless the test gives one. */
const childEnv = (env?: Readonly<Record<string, string>>): NodeJS.ProcessEnv => {
  const out: NodeJS.ProcessEnv = { ...process.env }
  delete out.ANTHROPIC_API_KEY
  delete out.ANTHROPIC_BASE_URL
  delete out.NODE_OPTIONS
  delete out.TELEGRAM_BOT_TOKEN
  delete out.TELEGRAM_API_BASE
  return { ...out, ...env }
}

/** Starts the chatbot with `args`. */
export const startChatbot = (
  args: ReadonlyArray<string>,
  options?: {
    readonly env?: Readonly<Record<string, string>>
    /** Another program to run the same way (default the chatbot, `examples/chatbot/main.ts`). */
    readonly script?: string
  }
): Chatbot => {
  const child = spawn(process.execPath, [...nodeArgs(options?.script ?? "examples/chatbot/main.ts"), ...args], {
    cwd: ROOT,
    env: childEnv(options?.env),
    stdio: ["pipe", "pipe", "pipe"]
  })
  const stdout: Array<string> = []
  const stderr: Array<string> = []
  const events: Array<ChatEvent> = []
  const nonJson: Array<string> = []
  const listeners = new Set<() => void>()
  const notify = () => {
    for (const listener of [...listeners]) listener()
  }
  const lines = (stream: NodeJS.ReadableStream, onLine: (line: string) => void) => {
    let rest = ""
    stream.setEncoding("utf8")
    stream.on("data", (chunk: string) => {
      rest += chunk
      let nl: number
      while ((nl = rest.indexOf("\n")) >= 0) {
        onLine(rest.slice(0, nl))
        rest = rest.slice(nl + 1)
      }
      notify()
    })
    stream.on("end", () => {
      if (rest !== "") onLine(rest)
      rest = ""
      notify()
    })
  }
  lines(child.stdout, (line) => {
    stdout.push(line)
    try {
      const value = JSON.parse(line)
      if (typeof value === "object" && value !== null && typeof value.type === "string") events.push(value)
      else nonJson.push(line)
    } catch {
      nonJson.push(line)
    }
  })
  lines(child.stderr, (line) => stderr.push(line))
  let exit: ChildExit | undefined
  const exited = new Promise<ChildExit>((resolve) => {
    child.on("close", (code, signal) => {
      exit = { code, signal }
      resolve(exit)
      notify()
    })
  })
  child.stdin.on("error", () => {
    // the child may exit before reading everything (e.g. a test kills it)
  })

  /** Resolves when `check` returns a value; fails at the deadline or when the child exits first. */
  const waitFor = <A>(check: () => A | undefined, what: string, timeoutMs: number): Promise<A> =>
    new Promise<A>((resolve, reject) => {
      const attempt = (): boolean => {
        const value = check()
        if (value !== undefined) {
          done()
          resolve(value)
          return true
        }
        if (exit !== undefined) {
          done()
          reject(
            new Error(
              `chatbot exited (${JSON.stringify(exit)}) before ${what}\nstdout:\n${stdout.join("\n")}\nstderr:\n${
                stderr.join("\n")
              }`
            )
          )
          return true
        }
        return false
      }
      const timer = setTimeout(() => {
        done()
        reject(
          new Error(
            `timed out after ${timeoutMs} ms waiting for ${what}\nstdout:\n${stdout.join("\n")}\nstderr:\n${
              stderr.join("\n")
            }`
          )
        )
      }, timeoutMs)
      const listener = () => void attempt()
      const done = () => {
        clearTimeout(timer)
        listeners.delete(listener)
      }
      if (!attempt()) listeners.add(listener)
    })

  return {
    child,
    stdout,
    stderr,
    events,
    nonJson,
    write: (text) => void child.stdin.write(text),
    end: (text) => void (text === undefined ? child.stdin.end() : child.stdin.end(text)),
    waitForEvent: (match, what = "an event", options) =>
      waitFor(
        () => {
          for (let i = options?.from ?? 0; i < events.length; i++) if (match(events[i]!)) return events[i]
          return undefined
        },
        what,
        options?.timeoutMs ?? DEFAULT_WAIT_MS
      ),
    waitForStderr: (pattern, timeoutMs = DEFAULT_WAIT_MS) =>
      waitFor(() => stderr.find((line) => pattern.test(line)), `stderr matching ${pattern}`, timeoutMs),
    waitForStdout: (pattern, timeoutMs = DEFAULT_WAIT_MS) =>
      waitFor(() => stdout.find((line) => pattern.test(line)), `stdout matching ${pattern}`, timeoutMs),
    exited,
    waitForExit: (timeoutMs = DEFAULT_WAIT_MS) =>
      new Promise<ChildExit>((resolve, reject) => {
        const timer = setTimeout(() => {
          child.kill("SIGKILL")
          reject(
            new Error(
              `chatbot did not exit within ${timeoutMs} ms\nstdout:\n${stdout.join("\n")}\nstderr:\n${
                stderr.join("\n")
              }`
            )
          )
        }, timeoutMs)
        void exited.then((value) => {
          clearTimeout(timer)
          resolve(value)
        })
      }),
    kill: (signal) => void child.kill(signal)
  }
}

/**
 * Sends `/status` (in `--json` mode) until lane `main` reports `running` turns: a barrier that
 * says every line written before was accepted and a turn runs. Returns that status event.
 */
export const untilMainRuns = async (bot: Chatbot, running = 1): Promise<ChatEvent> => {
  while (true) {
    const from = bot.events.length
    bot.write("/status\n")
    const status = await bot.waitForEvent((e) => e.type === "status", "a status event", { from })
    if (status.lanes.find((l: any) => l.lane === "main").running >= running) return status
  }
}

/** Runs the chatbot to its end with `input` on standard input (closed after it). */
export const runChatbot = async (
  args: ReadonlyArray<string>,
  input = "",
  options?: { readonly env?: Readonly<Record<string, string>>; readonly timeoutMs?: number; readonly script?: string }
): Promise<{ readonly exit: ChildExit; readonly bot: Chatbot }> => {
  const bot = startChatbot(args, options)
  bot.end(input)
  const exit = await bot.waitForExit(options?.timeoutMs)
  return { exit, bot }
}

/** The JSON lines of a file (an empty list when it does not exist). */
export const readJsonLines = (file: string): Array<any> =>
  fs.existsSync(file)
    ? fs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "").map((line) => JSON.parse(line))
    : []

/**
 * Resolves when the JSON lines of `file` satisfy `check` (polled every 20 ms: a file has no event
 * to wait on portably), failing at the deadline.
 */
export const waitForFile = <A>(
  file: string,
  check: (lines: Array<any>) => A | undefined,
  timeoutMs = DEFAULT_WAIT_MS
): Promise<A> =>
  new Promise<A>((resolve, reject) => {
    const started = Date.now()
    const poll = () => {
      let value: A | undefined
      try {
        value = check(readJsonLines(file))
      } catch {
        value = undefined // a line being written
      }
      if (value !== undefined) return resolve(value)
      if (Date.now() - started > timeoutMs) return reject(new Error(`timed out waiting on ${file}`))
      setTimeout(poll, 20)
    }
    poll()
  })
