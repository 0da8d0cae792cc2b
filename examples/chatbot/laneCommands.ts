/**
 * The chatbot's lane commands: `/restart <lane>`, `/pause <lane>`, `/resume <lane>`,
 * `/limits <lane> <concurrent> [queued]`. A bad argument is one usage line that names the lanes.
 */
import { Effect } from "effect"
import type { Agent } from "../../src/agent/index.js"
import type { RequestError } from "../../src/queue/index.js"
import type { Output } from "./output.js"

/** The lane named by `arg`, or undefined after printing why not (no lane given, an unknown one). */
const knownLane = (agent: Agent.Agent, output: Output, usage: string, arg: string) =>
  Effect.map(agent.snapshot, ({ lanes }) => {
    const known = `lanes are ${lanes.map((l) => l.lane).join(", ")}`
    if (arg === "") return void output.error(`usage: ${usage} (${known})`)
    const lane = lanes.find((l) => l.lane === arg)
    if (lane === undefined) return void output.error(`error: unknown lane \`${arg}\`; ${known}`)
    return lane
  })

/** Runs a control of the agent: a refusal is one error line, success goes to `done`. */
const apply = <A>(output: Output, control: Effect.Effect<A, RequestError>, done: (a: A) => void) =>
  Effect.match(control, { onFailure: (error) => output.error(`error: ${error.message}`), onSuccess: done })

export const restart = (agent: Agent.Agent, output: Output, arg: string) =>
  Effect.gen(function*() {
    const lane = yield* knownLane(agent, output, "/restart <lane>", arg)
    if (lane === undefined) return
    yield* apply(output, agent.restartLane(lane.lane), (generation) => {
      output.event({ type: "restart", lane: lane.lane, generation })
      output.say(`lane ${lane.lane} restarted (generation ${generation})`)
    })
  })

/** `/pause <lane>` (`pausing`) or `/resume <lane>`. */
export const pauseOrResume = (agent: Agent.Agent, output: Output, arg: string, pausing: boolean) =>
  Effect.gen(function*() {
    const lane = yield* knownLane(agent, output, pausing ? "/pause <lane>" : "/resume <lane>", arg)
    if (lane === undefined) return
    const name = lane.lane
    yield* apply(output, pausing ? agent.pauseLane(name) : agent.resumeLane(name), () => {
      if (pausing) {
        output.event({ type: "pause", lane: name, wasPaused: lane.paused })
        output.say(
          lane.paused
            ? `lane ${name} was already paused`
            : `lane ${name} paused: running turns go on, nothing more starts until /resume ${name}`
        )
      } else {
        output.event({ type: "resume", lane: name, wasPaused: lane.paused, waiting: lane.waiting })
        output.say(
          lane.paused
            ? `lane ${name} resumed (${lane.waiting} waiting turn(s) may start)`
            : `lane ${name} was not paused`
        )
      }
    })
  })

const LIMITS_USAGE = "/limits <lane> <concurrent> [queued]"
const WHOLE = /^\d+$/

export const limits = (agent: Agent.Agent, output: Output, arg: string) =>
  Effect.gen(function*() {
    const [name = "", ...numbers] = arg === "" ? [] : arg.split(/\s+/)
    const lane = yield* knownLane(agent, output, LIMITS_USAGE, name)
    if (lane === undefined) return
    if (numbers.length === 0 || numbers.length > 2) {
      return output.error(
        `usage: ${LIMITS_USAGE} (lane ${lane.lane} has concurrent ${lane.concurrent}, queued ${lane.queued})`
      )
    }
    const [concurrent, queued] = numbers
    for (const [what, text] of [["concurrent", concurrent], ["queued", queued]] as const) {
      if (text !== undefined && !WHOLE.test(text)) {
        return output.error(`error: <${what}> must be a whole number, got \`${text}\` (usage: ${LIMITS_USAGE})`)
      }
    }
    const change = {
      concurrent: Number(concurrent),
      ...(queued === undefined ? {} : { queued: Number(queued) })
    }
    yield* apply(output, agent.setLaneLimits(lane.lane, change), () => {
      const now = { concurrent: change.concurrent, queued: change.queued ?? lane.queued }
      output.event({ type: "limits", lane: lane.lane, ...now })
      output.say(`lane ${lane.lane} limits: concurrent ${now.concurrent}, queued ${now.queued}`)
    })
  })
