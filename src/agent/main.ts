/**
 * Running an agent as a program's main: graceful shutdown on SIGTERM / SIGINT / SIGHUP.
 *
 * `runMain` installs the signal handlers and runs a program; the first SIGTERM, SIGINT or SIGHUP
 * completes `main.signal` (the program then stops taking input and shuts down); a second one
 * exits at once with 128 + the signal's number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP). When the
 * program ends, standard output and standard error are flushed and the process exits with the
 * program's code (0 by default, 1 after a failure, whose cause goes to standard error).
 *
 * Standard output and standard error failing (a reader that went away, a terminal that closed) do not
 * crash the program: what it prints is for people, and the shutdown must go on. A terminal that hung
 * up is let go of at exit (see `releaseHungUpTerminals`).
 *
 * `serve` is the usual body: read input until it ends or a signal comes, then `agent.shutdown`
 * (drain the lanes, let deliveries in flight end, flush the log). What was not delivered stays
 * in the log and is delivered on the next start.
 */
import { Cause, Deferred, Effect, Exit, Fiber, Logger } from "effect"
import * as fs from "node:fs"
import * as tty from "node:tty"
import type { Agent, ShutdownReport } from "./Agent.js"

/** The signals that ask for a graceful shutdown (SIGHUP: the terminal went away, treated like SIGTERM). */
export type ShutdownSignal = "SIGTERM" | "SIGINT" | "SIGHUP"

/** Why the program ended: a signal, or the end of its input. */
export type StopReason = ShutdownSignal | "eof"

/** What `runMain` gives its program. */
export interface MainContext {
  /** Completes with the first SIGTERM, SIGINT or SIGHUP. */
  readonly signal: Effect.Effect<ShutdownSignal>
  /** The first signal received, if any. */
  readonly received: () => ShutdownSignal | undefined
}

/** The exit code of a process ended by `signal` (128 + its number). */
export const signalExitCode = (
  signal: ShutdownSignal
): number => (signal === "SIGINT" ? 130 : signal === "SIGHUP" ? 129 : 143)

/**
 * A terminal that hung up (its window closed, its SSH session dropped) fails every read, write and
 * mode change with EIO, and Node 20 aborts at exit when it cannot put a standard stream that was a
 * terminal back in the mode it found it in (`ResetStdio` in node.cc allows only EPERM): a clean
 * shutdown would end in an assertion, a native stack trace and SIGABRT. So each standard descriptor
 * that was a terminal at start and is no longer one at exit (a hung-up terminal answers EIO) is
 * closed as the process exits; that code skips closed descriptors. Only the exit's own code runs
 * after this, so no descriptor number is reused meanwhile.
 */
const releaseHungUpTerminals = () => {
  const terminals = [0, 1, 2].filter((fd) => tty.isatty(fd))
  if (terminals.length === 0) return
  process.on("exit", () => {
    for (const fd of terminals) {
      if (tty.isatty(fd)) continue
      try {
        fs.closeSync(fd)
      } catch {
        // not open
      }
    }
  })
}

/**
 * Runs `program` as the process's main (see the module comment). Effect's loggers write to
 * standard error, so standard output stays the program's own. Call it once per process.
 */
export const runMain = <E>(
  program: (main: MainContext) => Effect.Effect<number | void, E>,
  options?: {
    /** Called (synchronously) before the process exits on a second signal. */
    readonly onSecondSignal?: (signal: ShutdownSignal) => void
  }
): void => {
  const first = Deferred.makeUnsafe<ShutdownSignal>()
  let received: ShutdownSignal | undefined
  const onSignal = (signal: ShutdownSignal) => {
    if (received === undefined) {
      received = signal
      Deferred.doneUnsafe(first, Exit.succeed(signal))
      return
    }
    try {
      options?.onSecondSignal?.(signal)
    } finally {
      process.exit(signalExitCode(signal))
    }
  }
  process.on("SIGTERM", () => onSignal("SIGTERM"))
  process.on("SIGINT", () => onSignal("SIGINT"))
  process.on("SIGHUP", () => onSignal("SIGHUP"))
  // Printing is for people: a reader or a terminal that went away must not stop the shutdown.
  process.stdout.on("error", () => {})
  process.stderr.on("error", () => {})
  releaseHungUpTerminals()

  const main: MainContext = { signal: Deferred.await(first), received: () => received }
  const fiber = Effect.runFork(program(main).pipe(Effect.provideService(Logger.LogToStderr, true)))
  fiber.addObserver((exit) => {
    let code: number
    if (Exit.isSuccess(exit)) {
      code = typeof exit.value === "number" ? exit.value : 0
    } else if (Cause.hasInterruptsOnly(exit.cause)) {
      code = received === undefined ? 1 : signalExitCode(received)
    } else {
      process.stderr.write(`${Cause.pretty(exit.cause)}\n`)
      code = 1
    }
    exitAfterFlush(code)
  })
}

/** Exits once what was written to standard output and standard error has been handed to the OS. */
export const exitAfterFlush = (code: number): void => {
  process.exitCode = code
  process.stdout.write("", () => process.stderr.write("", () => process.exit(code)))
}

/**
 * Reads input (`input` runs until the input ends) until it ends or the first signal comes; then
 * stops the input (interrupting it), shuts the agent down and reports why and how it went.
 */
export const serve = <E, R>(options: {
  readonly agent: Agent
  readonly main: MainContext
  readonly input: Effect.Effect<void, E, R>
  /** Called once the input is stopped, before the shutdown begins. */
  readonly onStop?: (reason: StopReason) => void
}): Effect.Effect<{ readonly reason: StopReason; readonly report: ShutdownReport }, E, R> =>
  Effect.gen(function*() {
    const input = yield* Effect.forkChild(options.input)
    const reason: StopReason = yield* Effect.raceFirst(
      Effect.as(Fiber.join(input), "eof" as const),
      options.main.signal
    )
    yield* Fiber.interrupt(input)
    options.onStop?.(reason)
    const report = yield* options.agent.shutdown
    return { reason, report }
  })
