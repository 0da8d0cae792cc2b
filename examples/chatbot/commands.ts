/** The chatbot's commands: `/help`, `/status`, `/retry [session]`, `/restart <lane>`, `/quit`. */
import { Effect } from "effect"
import type { Agent } from "../../src/agent/index.js"
import type { Logs } from "./logs.js"
import type { Output } from "./output.js"

/** The commands, for `/help`. */
export const COMMANDS: ReadonlyArray<readonly [string, string]> = [
  ["/help", "this list"],
  ["/status", "the lanes, the deliveries, the messages not answered yet, the recent warnings"],
  ["/retry", "answer now the messages whose model call failed (also /retry <session>)"],
  ["/restart <lane>", "restart a lane (its running turns fail stale; their messages get a fresh turn)"],
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
        `lane ${lane.lane}: running ${lane.running}, waiting ${lane.waiting}, keys ${lane.keys}, generation ${lane.generation}${
          lane.draining ? ", draining" : ""
        }`
      )
    }
    const d = snapshot.deliveries
    output.say(`deliveries: pending ${d.pending}, dead ${d.dead}, in flight ${d.inFlight}, delivered ${d.delivered}`)
    if (snapshot.unanswered.length === 0) output.say("unanswered: none")
    for (const u of snapshot.unanswered) {
      const f = u.failure
      const failing = f === undefined
        ? "being answered"
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

const restart = (agent: Agent.Agent, output: Output, lane: string) =>
  Effect.gen(function*() {
    const lanes = (yield* agent.snapshot).lanes.map((l) => l.lane)
    const known = `lanes are ${lanes.join(", ")}`
    if (lane === "") return output.error(`usage: /restart <lane> (${known})`)
    if (!lanes.includes(lane)) return output.error(`error: unknown lane \`${lane}\`; ${known}`)
    yield* agent.restartLane(lane).pipe(
      Effect.match({
        onFailure: (error) => output.error(`error: ${error.message}`),
        onSuccess: (generation) => {
          output.event({ type: "restart", lane, generation })
          output.say(`lane ${lane} restarted (generation ${generation})`)
        }
      })
    )
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
        for (const [command, what] of COMMANDS) output.say(`${command.padEnd(16)} ${what}`)
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
      default:
        output.error(`error: unknown command ${name} (/help lists the commands)`)
    }
  })
