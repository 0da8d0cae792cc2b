/** Shared helpers of the cluster tests: free ports, one in-process runner. */
import { Layer } from "effect"
import type { Effect, Scope } from "effect"
import type { ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as ClusterLayer from "../../src/cluster/ClusterLayer.js"
import { nodeArgs } from "../support/node.js"

/** A TCP port free right now on loopback. */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

/** The cluster runtime of one runner in this process, for the Scope's lifetime. */
export const runnerContext = (url: string, port: number) =>
  Layer.build(ClusterLayer.layer({ postgres: url, port, shardsPerGroup: 16, maxConnections: 6 })) as Effect.Effect<
    any,
    unknown,
    Scope.Scope
  >

/** A runner process started by a test. */
export interface RunnerProcess {
  readonly name: string
  readonly port: number
  readonly child: ChildProcess
  alive: boolean
  readonly log: Array<string>
  /** Its standard output, line by line (the ready line first, the shutdown line last). */
  readonly stdout: Array<string>
  /** The ready line it printed. */
  ready: { readonly type: "ready"; readonly name: string; readonly pid: number; readonly http: number } | undefined
  /** Resolves with the exit code (or signal) once the process ended. */
  readonly exited: Promise<number | string>
}

/** Starts `src/cluster/runner-main.ts` and resolves once it printed its ready line. */
export const startRunner = async (options: {
  readonly url: string
  readonly outbox: string
  readonly args?: ReadonlyArray<string>
  /** More environment (e.g. `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` of a fake Messages API). */
  readonly env?: Readonly<Record<string, string>>
}): Promise<RunnerProcess> => {
  const { spawn } = await import("node:child_process")
  const path = await import("node:path")
  const port = await freePort()
  const clusterPort = await freePort()
  const root = path.resolve(import.meta.dirname, "../..")
  const name = `r${port}`
  const child = spawn(process.execPath, [
    ...nodeArgs("src/cluster/runner-main.ts"),
    "--postgres",
    options.url,
    "--port",
    String(port),
    "--cluster-port",
    String(clusterPort),
    "--name",
    name,
    "--outbox",
    options.outbox,
    "--shards",
    "32",
    ...(options.args ?? [])
  ], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ANTHROPIC_API_KEY: "", SWITCHYARD_EXIT_WITH_PARENT: "1", ...options.env }
  })
  const log: Array<string> = []
  const stdout: Array<string> = []
  const exited = new Promise<number | string>((resolve) =>
    child.once("exit", (code, signal) => resolve(code ?? signal ?? -1))
  )
  const runner: RunnerProcess = { name, port, child, alive: true, log, stdout, ready: undefined, exited }
  let partial = ""
  void exited.then(() => {
    runner.alive = false
  })
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} not ready in 30 s:\n${log.join("")}`)), 30_000)
    child.stdout!.on("data", (d: Buffer) => {
      log.push(d.toString())
      const lines = (partial + d.toString()).split("\n")
      partial = lines.pop()!
      for (const line of lines) {
        stdout.push(line)
        if (line.includes(`"type":"ready"`)) {
          runner.ready = JSON.parse(line)
          clearTimeout(timer)
          resolve()
        }
      }
    })
    child.stderr!.on("data", (d: Buffer) => log.push(d.toString()))
    void exited.then(() => reject(new Error(`${name} exited before ready:\n${log.join("")}`)))
  })
  return runner
}

/** Sends SIGTERM; resolves with the exit code and how long the runner took to exit after the signal. */
export const terminate = async (
  runner: RunnerProcess
): Promise<{ readonly code: number | string; readonly ms: number }> => {
  const at = Date.now()
  runner.child.kill("SIGTERM")
  const code = await runner.exited
  return { code, ms: Date.now() - at }
}

/** `POST /sessions/:session/messages?wait=<waitMs>`: the status and the JSON body. */
export const postMessage = (port: number, session: string, text: string, waitMs = 30_000) =>
  fetch(`http://127.0.0.1:${port}/sessions/${encodeURIComponent(session)}/messages?wait=${waitMs}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ text })
  }).then(async (r) => ({
    status: r.status,
    body: (await r.json()) as {
      runId: string
      pending?: boolean
      reason?: string
      error?: string
      reply?: { text: string; turnRunner: string; deliveryId: string }
    }
  }))

/** Polls `check` until it returns true or `ms` pass (a deadline on a condition, not a hopeful sleep). */
export const until = async (what: string, ms: number, check: () => Promise<boolean>): Promise<void> => {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** `GET /status` of a runner. */
export const status = async (port: number): Promise<{
  readonly cluster: { readonly shards: number; readonly entities: number }
  readonly lanes: ReadonlyArray<
    { readonly lane: string; readonly running: number; readonly waiting: number; readonly generation: number }
  >
  readonly members: ReadonlyArray<{ readonly member: string }>
  readonly counters: Readonly<Record<string, number>>
}> => (await fetch(`http://127.0.0.1:${port}/status`)).json() as any

/** Waits until every runner holds shards and together they hold all `shards` (the assignment settled). */
export const shardsSettled = (ports: ReadonlyArray<number>, shards: number, ms = 30_000): Promise<void> =>
  until(`the ${shards} shards to spread over ${ports.length} runners`, ms, async () => {
    const held = await Promise.all(ports.map(async (p) => (await status(p)).cluster.shards))
    return held.every((n) => n > 0) && held.reduce((a, b) => a + b, 0) === shards
  })

/** SIGKILLs (after a SIGCONT, for a stopped one) every runner still alive; resolves once all exited. */
export const killRunners = async (runners: ReadonlyArray<RunnerProcess>): Promise<void> => {
  for (const r of runners) {
    if (r.alive) {
      r.child.kill("SIGCONT")
      r.child.kill("SIGKILL")
    }
  }
  await Promise.all(runners.map((r) => r.exited))
}

/** The end of a file of runner processes: every runner killed, its database dropped, its directory removed. */
export const tearDown = async (
  runners: ReadonlyArray<RunnerProcess>,
  db: { readonly drop: () => Promise<void> } | undefined,
  dir: string
): Promise<void> => {
  await killRunners(runners)
  await db?.drop()
  fs.rmSync(dir, { recursive: true, force: true })
}

/** Waits until one of `runners` runs a turn on `lane` and returns it. */
export const runningOn = async (
  runners: ReadonlyArray<RunnerProcess>,
  lane = "main",
  ms = 10_000
): Promise<RunnerProcess> => {
  let found: RunnerProcess | undefined
  await until(`a turn of lane ${lane} to run on one runner`, ms, async () => {
    for (const r of runners) {
      if ((await status(r.port)).lanes.some((l) => l.lane === lane && l.running > 0)) found = r
    }
    return found !== undefined
  })
  return found!
}
