/**
 * The chatbot's commands: `/help`, `/status`, `/retry [session]`, the lane commands
 * (`/restart`, `/pause`, `/resume`, `/limits`: laneCommands.ts), `/quit`.
 */
import { Effect } from "effect"
import type { Agent } from "../../src/agent/index.js"
import { limits, pauseOrResume, restart } from "./laneCommands.js"
import type { Logs } from "./logs.js"
import type { Output } from "./output.js"

/** The commands, for `/help`. */
export const COMMANDS: ReadonlyArray<readonly [string, string]> = [
  ["/help", "this list"],
  ["/status", "the lanes, the deliveries, the messages not answered yet, the recent warnings"],
  ["/retry", "answer now the messages whose model call failed (also /retry <session>)"],
  ["/restart <lane>", "restart a lane (its running turns fail stale; their messages get a fresh turn)"],
  ["/pause <lane>", "start nothing more in a lane (running turns go on, messages wait)"],
  ["/resume <lane>", "start what waits in a paused lane"],
  ["/limits <lane> <concurrent> [queued]", "change how many turns of a lane run at once (and wait)"],
  ["/quit", "answer what is owed, then exit (like Ctrl+D)"]
]

const time = (date: Date) => date.toISOString().slice(11, 19)

const status = (agent: Agent.Agent, output: Output, logs: Logs) =>
  Effect.gen(function*() {
    const snapshot = yield* agent.snapshot
    const warnings = logs.warnings()
    output.event({
      type: "status",
      lanes: snapshot.lanes,
      deliveries: snapshot.deliveries,
      unanswered: snapshot.unanswered,
      warnings: warnings.count
    })
    for (const lane of snapshot.lanes) {
      output.say(
        `lane ${lane.lane}: running ${lane.running}, waiting ${lane.waiting}, keys ${lane.keys}, generation ${lane.generation}, ` +
          `concurrent ${lane.concurrent}, queued ${lane.queued}${lane.paused ? ", paused" : ""}${
            lane.draining ? ", draining" : ""
          }`
      )
    }
    const d = snapshot.deliveries
    output.say(`deliveries: pending ${d.pending}, dead ${d.dead}, in flight ${d.inFlight}, delivered ${d.delivered}`)
    if (snapshot.unanswered.length === 0) output.say("unanswered: none")
    // With main paused and nothing of it running, no unanswered session is being answered.
    const mainPaused = snapshot.lanes.some((l) => l.lane === "main" && l.paused && l.running === 0)
    for (const u of snapshot.unanswered) {
      const f = u.failure
      const failing = f === undefined
        ? (mainPaused ? "waiting: lane main is paused (/resume main)" : "being answered")
        : `failing since ${time(new Date(f.since))} (${f.attempts} attempt(s)): ${f.error}; ` +
          (f.retryAt === undefined ? "waits for a new message or /retry" : `next try ${time(new Date(f.retryAt))}`)
      output.say(`unanswered: ${u.session}: ${u.messages} message(s) accepted, ${failing}`)
    }
    if (warnings.count === 0) {
      output.say("warnings: none")
    } else {
      const shown = logs.level === "none" || logs.level === "error"
        ? " (--log-level warn prints them as they come)"
        : ""
      output.say(`warnings: ${warnings.count}, the last ${warnings.recent.length}${shown}:`)
      for (const w of warnings.recent) output.say(`  ${time(w.at)} ${w.level} ${w.message}`)
    }
  })

/** Handles a line that starts with `/`; `"quit"` ends the input. */
export const runCommand = (
  agent: Agent.Agent,
  output: Output,
  logs: Logs,
  text: string
): Effect.Effect<"quit" | void> =>
  Effect.gen(function*() {
    const [name = "", ...rest] = text.trim().split(/\s+/)
    const arg = rest.join(" ")
    switch (name) {
      case "/quit":
        if (arg !== "") return output.error(`error: /quit takes no argument, got \`${arg}\` (usage: /quit)`)
        return "quit" as const
      case "/help":
        output.event({ type: "help", commands: COMMANDS.map(([command]) => command) })
        for (const [command, what] of COMMANDS) {
          // A command longer than the column gets its line, the text under it.
          if (command.length > 16) output.say(command)
          output.say(`${(command.length > 16 ? "" : command).padEnd(16)} ${what}`)
        }
        output.say("Any other line is a message. Ctrl+C finishes the turns in flight and exits; twice exits at once.")
        return
      case "/status":
        return yield* status(agent, output, logs)
      case "/retry": {
        const sessions = yield* agent.retry(arg === "" ? undefined : arg)
        output.event({ type: "retry", sessions })
        output.say(
          sessions === 0 ? "nothing to retry: no session's turn is failing" : `retrying ${sessions} session(s) now`
        )
        return
      }
      case "/restart":
        return yield* restart(agent, output, arg)
      case "/pause":
        return yield* pauseOrResume(agent, output, arg, true)
      case "/resume":
        return yield* pauseOrResume(agent, output, arg, false)
      case "/limits":
        return yield* limits(agent, output, arg)
      default:
        output.error(`error: unknown command ${name} (/help lists the commands)`)
    }
  })
