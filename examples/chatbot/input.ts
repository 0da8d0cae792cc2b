/**
 * Standard input, line by line: from a pipe, or from a terminal with a `you> ` prompt where what
 * is typed is echoed and can be edited (readline with `output`; lines typed while a turn runs
 * are shown and read like the others).
 */
import { Effect } from "effect"
import * as readline from "node:readline"
import { echoOutput, fixPastes } from "./readlineFixes.js"
import type { Screen } from "./screen.js"

/** A line that is a user message (not empty, not a command). */
export const isMessage = (line: string): boolean => {
  const text = line.trim()
  return text !== "" && !text.startsWith("/")
}

/**
 * Reads standard input until it ends (or `handle` says `quit`), in order. User messages that are
 * already buffered together go to `handleMessages` at once; every other line to `handle`. With a
 * `screen`, standard input is a terminal: the prompt is shown until the input ends.
 */
export const readInput = (
  screen: Screen | undefined,
  handle: (line: string) => Effect.Effect<"quit" | void>,
  handleMessages: (lines: ReadonlyArray<string>) => Effect.Effect<void>
): Effect.Effect<void> =>
  Effect.gen(function*() {
    const lines: Array<string | null> = []
    let wake: (() => void) | undefined
    const push = (line: string | null) => {
      lines.push(line)
      const w = wake
      wake = undefined
      w?.()
    }
    yield* Effect.acquireRelease(
      Effect.sync(() => {
        // Node 20's readline, with its faults worked around (readlineFixes.ts).
        let typed: readline.Interface | undefined
        const rl = readline.createInterface({
          input: process.stdin,
          ...(screen === undefined
            ? { terminal: false }
            : { output: echoOutput(process.stdout, () => typed?.line), terminal: true }),
          crlfDelay: Infinity
        })
        typed = rl
        if (screen !== undefined) fixPastes(rl, process.stdin)
        rl.on("line", (line) => {
          screen?.entered(line)
          push(line)
        })
        rl.on("close", () => push(null))
        // The terminal went away (a closed window, a dropped SSH session): reading, or readline putting
        // the terminal back out of raw mode, fails with EIO. That is the end of the input, not a crash:
        // the shutdown that follows (SIGHUP comes too) still drains, flushes and releases the lock.
        rl.on("error", () => push(null))
        // In a terminal, readline takes Ctrl+C itself: pass it on as the signal it means.
        rl.on("SIGINT", () => process.kill(process.pid, "SIGINT"))
        screen?.attach(rl)
        return rl
      }),
      (rl) =>
        Effect.sync(() => {
          screen?.detach()
          rl.close()
          process.stdin.destroy()
        })
    )
    let next = 0
    while (true) {
      if (next === lines.length) {
        lines.length = 0 // everything read was handled: keep no memory of it
        next = 0
        yield* Effect.callback<void>((resume) => {
          if (next < lines.length) resume(Effect.void)
          else wake = () => resume(Effect.void)
        })
        continue
      }
      const line = lines[next]!
      if (line === null) return
      if (isMessage(line)) {
        const run: Array<string> = []
        while (next < lines.length && lines[next] !== null && isMessage(lines[next]!)) {
          run.push(lines[next]!)
          lines[next++] = ""
        }
        // Handled whole, even when a signal stops the input meanwhile.
        yield* Effect.uninterruptible(handleMessages(run))
        continue
      }
      lines[next++] = ""
      if ((yield* Effect.uninterruptible(handle(line))) === "quit") return
    }
  }).pipe(Effect.scoped)
