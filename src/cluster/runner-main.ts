/**
 * `npm run runner -- --postgres <url> --port <n> [options]`: one runner of a switchyard cluster.
 * Start several against the same Postgres (different ports); see docs/cluster.md.
 * Prints one JSON line `{"type":"ready","pid":...}` on standard output once it takes messages, and
 * `{"type":"shutdown",...}` as its last line. SIGTERM / SIGINT: stop taking messages, answer the clients
 * waiting on turns, drain, leave the cluster, exit 0, all within `--drain-timeout`; a second signal
 * exits at once (143 / 130). Logs go to standard error. A start that fails (Postgres unreachable, a
 * port in use, ...) prints one line `runner: <what failed>: <how to fix it>` on standard error and
 * exits 1 (`SWITCHYARD_DEBUG=1`: the whole cause too).
 */
// First: the rest of the runner's code is evaluated with the runner's V8 tiering (Tiering.ts).
import "./TieringApplied.js"
import { Command, InvalidArgumentError } from "commander"
import { Cause, Effect } from "effect"
import type { CronJob } from "../agent/CronJobs.js"
import { parseCronFlag } from "../agent/CronJobs.js"
import { exitAfterFlush, runMain } from "../agent/main.js"
import { DEFAULT_TURN_TIMEOUT_MS } from "../agent/turnTimeouts.js"
import { isLoopback } from "./IngressChecks.js"
import * as Postgres from "./Postgres.js"
import * as Runner from "./Runner.js"
import * as StartupFailure from "./StartupFailure.js"

const integer = (name: string, min: number, max?: number) => (value: string): number => {
  const n = Number(value)
  if (!Number.isInteger(n) || n < min || (max !== undefined && n > max)) {
    const range = max === undefined ? `from ${min} and up` : `from ${min} to ${max}`
    throw new InvalidArgumentError(`Expected \`${name}\` to be an integer ${range}, got \`${value}\``)
  }
  return n
}

/** The highest TCP port. */
const MAX_PORT = 65_535

const program = new Command("runner")
  .description("One runner of a switchyard cluster (effect/cluster over Postgres) with an HTTP ingress")
  .option(
    "--postgres <url>",
    "Postgres URL shared by every runner (or SWITCHYARD_POSTGRES)",
    process.env.SWITCHYARD_POSTGRES
  )
  .requiredOption("--port <n>", "HTTP ingress port", integer("--port", 1, MAX_PORT))
  .option(
    "--cluster-port <n>",
    "runner-to-runner port (default: --port + 1000)",
    integer("--cluster-port", 1, MAX_PORT)
  )
  .option("--host <host>", "address to listen on and to be reached at", "127.0.0.1")
  .option("--name <name>", "runner name (default runner-<port>)")
  .option("--latency <ms>", "scripted model latency", integer("--latency", 0), 300)
  .option("--offline", "use the scripted model even when ANTHROPIC_API_KEY is set")
  .option(
    "--cron <expr|prompt>",
    "a cron job, repeatable (named cron-1, cron-2, ...)",
    (v: string, all: Array<string>) => [...all, v],
    [] as Array<string>
  )
  .option("--outbox <file>", "deliver replies as JSON lines appended to <file> instead of printing them")
  .option(
    "--drain-timeout <ms>",
    "deadline of the whole shutdown after SIGTERM / SIGINT",
    integer("--drain-timeout", 1),
    10_000
  )
  .option("--shards <n>", "shards per group; the same on every runner", integer("--shards", 1), 64)
  .option(
    "--delivery-timeout <ms>",
    "bound on one delivery attempt (a dead runner's claims wait this + 1 s)",
    integer("--delivery-timeout", 1),
    10_000
  )
  .option(
    "--retain <ms>",
    "keep turn records, cron firings and processed cluster messages this long",
    integer("--retain", 1),
    86_400_000
  )
  .option(
    "--heartbeat <ms>",
    "one heartbeat turn per cluster every <ms> (runs on one runner)",
    integer("--heartbeat", 100)
  )
  .option(
    "--token <token>",
    "bearer token every HTTP route but /healthz requires (or SWITCHYARD_TOKEN); needed for a non-loopback --host"
  )
  .option(
    "--lease <ms>",
    "shard lease: a runner silent this long loses its shards to the others",
    integer("--lease", 1000),
    10_000
  )
  .option(
    "--sweep <ms>",
    "how often to send again the unanswered ingress runs of this runner's shards (lost sends)",
    integer("--sweep", 10),
    2_000
  )
  .option(
    "--sweep-age <ms>",
    "how old an unanswered ingress run must be for the sweep to send it again",
    integer("--sweep-age", 0),
    5_000
  )
  .option("--main-concurrent <n>", "turns at once per runner on lane main", integer("--main-concurrent", 1))
  .option(
    "--turn-timeout <ms>",
    "a turn with no progress this long (no streamed text) is cut; its run fails `timeout`",
    integer("--turn-timeout", 1),
    DEFAULT_TURN_TIMEOUT_MS
  )
  .option(
    "--pg-warm <n>",
    `Postgres connections opened and warmed before the runner reports ready, kept open while idle (0: none; at most 9)`,
    integer("--pg-warm", 0),
    Runner.DEFAULT_WARM_CONNECTIONS
  )
  .option(
    "--no-hop",
    "send runs to their owner over the runners' cluster socket only, not to the owner's HTTP ingress (for runners whose HTTP ports cannot reach each other)"
  )
  .option(
    "--no-local-runs",
    "run the messages of sessions whose shard this runner holds through their effect/cluster entity too, not straight in the local lane"
  )
  .parse(process.argv)

const opts = program.opts<{
  postgres?: string
  port: number
  clusterPort?: number
  host: string
  name?: string
  latency: number
  offline?: boolean
  cron: Array<string>
  outbox?: string
  drainTimeout: number
  shards: number
  mainConcurrent?: number
  turnTimeout: number
  deliveryTimeout: number
  retain: number
  lease: number
  sweep: number
  sweepAge: number
  token?: string
  heartbeat?: number
  hop: boolean
  localRuns: boolean
  pgWarm: number
}>()

if (opts.postgres === undefined || opts.postgres === "") {
  program.error("Expected `--postgres <url>` (or SWITCHYARD_POSTGRES), got nothing")
}
const token = opts.token ?? (process.env.SWITCHYARD_TOKEN || undefined)
if (token === undefined && !isLoopback(opts.host)) {
  process.stderr.write(
    `runner: Expected a token (--token or SWITCHYARD_TOKEN) to listen on \`${opts.host}\`, which is not a loopback address, got none\n`
  )
  process.exit(1)
}
const jobs: Array<CronJob> = []
opts.cron.forEach((value, i) => {
  const job = parseCronFlag(value, i + 1)
  if (typeof job === "string") program.error(job)
  else jobs.push(job)
})
const apiKey = process.env.ANTHROPIC_API_KEY
const options: Runner.RunnerOptions = {
  postgres: opts.postgres!,
  port: opts.port,
  host: opts.host,
  latencyMs: opts.latency,
  cron: jobs,
  drainTimeoutMs: opts.drainTimeout,
  shardsPerGroup: opts.shards,
  deliveryTimeoutMs: opts.deliveryTimeout,
  retainMs: opts.retain,
  leaseMs: opts.lease,
  sweepMs: opts.sweep,
  sweepAgeMs: opts.sweepAge,
  hop: opts.hop,
  localRuns: opts.localRuns,
  ...(token === undefined ? {} : { token }),
  ...(opts.heartbeat === undefined ? {} : { heartbeatMs: opts.heartbeat }),
  ...(opts.clusterPort === undefined ? {} : { clusterPort: opts.clusterPort }),
  ...(opts.name === undefined ? {} : { name: opts.name }),
  ...(opts.outbox === undefined ? {} : { outboxFile: opts.outbox }),
  ...(apiKey && !opts.offline ? { anthropic: { apiKey } } : {}),
  turnTimeoutMs: opts.turnTimeout,
  warmConnections: opts.pgWarm,
  ...(opts.mainConcurrent === undefined ? {} : { lanes: { main: { concurrent: opts.mainConcurrent } } })
}

// For test harnesses: a runner whose parent died (it was re-parented) exits instead of running on.
if (process.env.SWITCHYARD_EXIT_WITH_PARENT === "1") {
  const parent = process.ppid
  setInterval(() => {
    if (process.ppid !== parent) process.exit(1)
  }, 1_000).unref()
}

const name = options.name ?? `runner-${opts.port}`
const line = (value: unknown) => process.stdout.write(JSON.stringify(value) + "\n")

const clusterPort = opts.clusterPort ?? opts.port + 1000
if (clusterPort > MAX_PORT) {
  process.stderr.write(
    `runner: --cluster-port defaults to --port + 1000 = ${clusterPort}, above ${MAX_PORT}: give --cluster-port\n`
  )
  process.exit(1)
}

runMain((main) =>
  Effect.gen(function*() {
    let ready = false
    const started = yield* Effect.scoped(Effect.gen(function*() {
      const runner = yield* Runner.start(options)
      ready = true
      line({
        type: "ready",
        name: runner.name,
        pid: process.pid,
        http: opts.port,
        cluster: clusterPort,
        postgres: Postgres.redactUrl(options.postgres),
        warm: { connections: runner.warmed.connections, ms: runner.warmed.ms }
      })
      const signal = yield* main.signal
      const at = Date.now()
      yield* Effect.logInfo(
        `${signal}: draining ${runner.name} (pid ${process.pid}), exit within ${opts.drainTimeout} ms`
      )
      // The deadline is the whole shutdown's: should leaving the cluster hang, the last line still comes, in time.
      setTimeout(() => {
        line({ type: "shutdown", name, pid: process.pid, signal, ms: Date.now() - at, forced: true })
        exitAfterFlush(0)
      }, Math.max(0, opts.drainTimeout - 100)).unref()
      const drain = yield* runner.stop
      return { signal, at, drain }
    })).pipe(
      // A start that fails is one line on standard error that says what and how to fix it, and exit 1.
      Effect.catchCause((cause) =>
        ready || Cause.hasInterruptsOnly(cause) ? Effect.failCause(cause) : Effect.sync(() => {
          const ctx = { postgres: options.postgres, host: opts.host, port: opts.port, clusterPort }
          process.stderr.write(`runner: ${StartupFailure.describe(cause, ctx)}\n`)
          if (process.env.SWITCHYARD_DEBUG === "1") process.stderr.write(`${Cause.pretty(cause)}\n`)
          return undefined
        })
      )
    )
    if (started === undefined) return 1
    const stop = started
    // The Scope is closed: local lanes drained, deliveries stopped, the cluster left.
    line({ type: "shutdown", name, pid: process.pid, signal: stop.signal, ms: Date.now() - stop.at, drain: stop.drain })
    return 0
  })
)
