/**
 * `npm run bench -- agent-turn`: what one chatbot turn costs end to end, the guard issue 12 asks for
 * ("nothing may get slower elsewhere: … the chatbot's turn cost"). An agent (`Agent.make`, as
 * `npm run chat` builds it) on the scripted model with no latency and a channel that takes every
 * reply at once; 16 sessions each send a message, await its turn's answer, and send the next, so the
 * whole path runs per turn: the transcript write, the lane, the model call, the reply appended to the
 * delivery log, the delivery and its ack. Measured: turns per second, CPU µs per turn (user + system,
 * the whole process), and the p50 / p99 of send → answer, with `fsync: "always"` (the chatbot's
 * default: every transcript write and log append durable) and `"never"`.
 *
 * Before / after in one process, rounds alternated (a shared machine's figures move between runs):
 *
 *   AGENT_TURN_TREES=/path/to/before,. npm run bench -- agent-turn
 *
 * loads `src/agent/index.ts` of each tree (a worktree of another commit, `node_modules` linked) and
 * prints one row per tree and mode, with the ratio to the first tree.
 */
import { Effect } from "effect"
import * as fs from "node:fs"
import { loadavg } from "node:os"
import { join, resolve } from "node:path"
import { gc, now, ratio, table } from "./lib.js"

const SESSIONS = Number(process.env.AGENT_TURN_SESSIONS ?? 16)
const TURNS = Number(process.env.AGENT_TURN_TURNS ?? 40)
const ROUNDS = Number(process.env.AGENT_TURN_ROUNDS ?? 5)
const root = join(process.cwd(), ".bench-tmp", "agent-turn")

// The agent module's surface this bench uses (the same in every tree it loads).
interface AgentModule {
  readonly Agent: {
    readonly make: (o: Record<string, unknown>) => Effect.Effect<
      {
        readonly send: (
          session: string,
          text: string
        ) => Effect.Effect<{ readonly await: Effect.Effect<{ readonly text: string }, unknown> }, unknown>
      },
      unknown,
      never
    >
  }
  readonly Model: never
  readonly ScriptedModel: { readonly make: (o: { latencyMs: number }) => unknown }
}

const trees = (process.env.AGENT_TURN_TREES ?? ".").split(",").map((t) => resolve(t))
const modules = await Promise.all(
  trees.map(async (t) => (await import(join(t, "src/agent/index.ts"))) as AgentModule)
)

interface Round {
  readonly perSecond: number
  readonly cpuUs: number
  readonly p50: number
  readonly p99: number
}

let runs = 0
const round = (m: AgentModule, fsync: "always" | "never"): Promise<Round> => {
  const stateDir = join(root, `state-${runs++}`)
  fs.mkdirSync(stateDir, { recursive: true })
  let delivered = 0
  let allDelivered: () => void = () => {}
  const lat: Array<number> = []
  const total = SESSIONS * TURNS
  const program = Effect.scoped(
    Effect.gen(function*() {
      const agent = yield* m.Agent.make({
        stateDir,
        fsync,
        channel: {
          name: "bench",
          send: () =>
            Effect.sync(() => {
              if (++delivered === total) allDelivered()
            })
        }
      }).pipe(Effect.provideService(m.Model as never, m.ScriptedModel.make({ latencyMs: 0 }) as never))
      const everyDelivery = new Promise<void>((r) => (allDelivered = r))
      gc()
      const c0 = process.cpuUsage()
      const t0 = now()
      yield* Effect.forEach(
        Array.from({ length: SESSIONS }, (_, s) => s),
        (s) =>
          Effect.gen(function*() {
            for (let t = 0; t < TURNS; t++) {
              const sent = now()
              const future = yield* agent.send(`session-${s}`, `message ${t} of session ${s}`)
              yield* future.await
              lat.push(now() - sent)
            }
          }),
        { concurrency: "unbounded", discard: true }
      )
      yield* Effect.promise(() => everyDelivery)
      const c = process.cpuUsage(c0)
      const seconds = (now() - t0) / 1000
      lat.sort((a, b) => a - b)
      return {
        perSecond: total / seconds,
        cpuUs: (c.user + c.system) / total,
        p50: lat[Math.floor(total * 0.5)]!,
        p99: lat[Math.floor(total * 0.99)]!
      }
    })
  ) as Effect.Effect<Round, unknown, never>
  return Effect.runPromise(program).finally(() => fs.rmSync(stateDir, { recursive: true, force: true }))
}

const median = (xs: ReadonlyArray<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor(s.length / 2)]!
}

fs.rmSync(root, { recursive: true, force: true })
fs.mkdirSync(root, { recursive: true })
const rows = []
for (const fsync of ["always", "never"] as const) {
  const results: Array<Array<Round>> = trees.map(() => [])
  // One round each to warm up (discarded), then ROUNDS alternated.
  for (const m of modules) await round(m, fsync)
  for (let r = 0; r < ROUNDS; r++) {
    for (let i = 0; i < modules.length; i++) results[i]!.push(await round(modules[i]!, fsync))
  }
  const firstCpu = median(results[0]!.map((x) => x.cpuUs))
  for (let i = 0; i < trees.length; i++) {
    const rs = results[i]!
    const cpu = median(rs.map((x) => x.cpuUs))
    rows.push({
      name: `${trees.length > 1 ? `${trees[i]} ` : ""}fsync "${fsync}"`,
      "turns/s (median)": median(rs.map((x) => x.perSecond)),
      "CPU µs/turn (median)": cpu,
      "per round": rs.map((x) => x.cpuUs.toFixed(0)).join(" "),
      "p50 ms": median(rs.map((x) => x.p50)),
      "p99 ms": median(rs.map((x) => x.p99)),
      "CPU vs first tree": ratio(cpu, firstCpu)
    })
  }
}
table(
  `Chatbot turns: ${SESSIONS} sessions x ${TURNS} turns each (send, await the answer, next), scripted model, ${ROUNDS} rounds`,
  rows
)
console.log(`load average: ${loadavg().map((l) => l.toFixed(2)).join(" ")} (2 cores)`)
fs.rmSync(root, { recursive: true, force: true })
