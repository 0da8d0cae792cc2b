/**
 * Cluster: messages per second through three runners against one, and the latency a turn adds on
 * the cluster against the single-process CommandQueue. Needs Postgres (127.0.0.1:5432, or
 * SWITCHYARD_TEST_PG); each run uses a database of its own, dropped afterwards.
 *
 * Every runner is a real process (`src/cluster/runner-main.ts`, scripted model, `--latency 20`);
 * a message is `POST /sessions/:id/messages?wait=...` to a random runner and counts when its reply
 * comes back. The single-process row runs the same 20 ms task through `CommandQueue.dispatch` +
 * `await` in this process.
 */
import { Effect, Layer } from "effect"
import type { Context } from "effect"
import { spawn } from "node:child_process"
import type { ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as ScriptedModel from "../src/agent/ScriptedModel.js"
import * as ClusterLayer from "../src/cluster/ClusterLayer.js"
import * as ClusterQueue from "../src/cluster/ClusterQueue.js"
import * as Postgres from "../src/cluster/Postgres.js"
import * as Timing from "../src/cluster/Timing.js"
import { CommandQueue } from "../src/queue/index.js"
import { freePort, ratio, table } from "./lib.js"
import { attribute, readStatements } from "./pglog.js"
import { breakdown } from "./timing.js"

const ADMIN = process.env.SWITCHYARD_TEST_PG ?? "postgres://postgres@127.0.0.1:5432/test"
const LATENCY = 20
const SESSIONS = 50
/**
 * The 500 ms phase spreads its messages over more sessions: a session's turns run where its shard is, and
 * 50 sessions hash onto 3 runners so unevenly (the busiest holds 18 to 24 of them, 20 at the median) that
 * the busiest runner's 8 slots bound the cluster at 2.5x of one runner (median); 480 sessions, one message
 * each, put that bound at 2.8x (median; 2.65x to 2.95x), so the row measures the cluster more than the
 * hash. The bound of each run is printed under the table. `CLUSTER_BENCH_SLOW_SESSIONS=50` for the old row.
 */
/** Shards per group of the runners (`--shards`). */
const SHARDS = Number(process.env.CLUSTER_BENCH_SHARDS ?? 32)
const SLOW_SHARDS = Number(process.env.CLUSTER_BENCH_SLOW_SHARDS ?? 300)
const SLOW_SESSIONS = Number(process.env.CLUSTER_BENCH_SLOW_SESSIONS ?? 480)
const SLOW_MESSAGES = Number(process.env.CLUSTER_BENCH_SLOW_MESSAGES ?? 480)
const MESSAGES = Number(process.env.CLUSTER_BENCH_MESSAGES ?? 600)
/**
 * Messages per runner sent between the cold and the warm throughput phases (`CLUSTER_BENCH_WARM`; 0 skips
 * the warm phase). A runner's first thousands of messages run code V8 has not optimized yet: interpreted,
 * then compiled on its worker threads, which the runner's CPU counts. The cold phase (the first 600 after
 * the latency samples, as this bench always measured) pays that; the warm phase measures a message once
 * the runner's code is compiled, as a runner that has been up a while runs it (bench/README.md, session 11).
 */
const WARM = Number(process.env.CLUSTER_BENCH_WARM ?? 1_500)
const CONCURRENCY = 48
/**
 * Clients of the 500 ms rows (`CLUSTER_BENCH_SLOW_CLIENTS`, default 48): each sends its next message when its
 * reply came. With 48, the busiest of three runners has ~17 messages on their way at a time for its 8 slots,
 * some of them still in their slot statement or on the hop when a slot frees; one runner has all 48.
 */
const SLOW_CLIENTS = Number(process.env.CLUSTER_BENCH_SLOW_CLIENTS ?? CONCURRENCY)
const LATENCY_SAMPLES = 40
const root = path.resolve(import.meta.dirname, "..")
/**
 * With `CLUSTER_BENCH_PGLOG=<the Postgres server log>` (e.g. /var/log/postgresql/postgresql-15-main.log),
 * each run's database logs every statement (`log_statement = 'all'`) and the throughput phase's
 * transactions are attributed to effect/cluster or switchyard (bench/pglog.ts). Logging slows Postgres:
 * take timings from a run without it.
 */
const PGLOG = process.env.CLUSTER_BENCH_PGLOG
/** `CLUSTER_BENCH_PROFILE=<dir>`: every runner writes a CPU profile there (`node --cpu-prof`) when it exits. */
const PROFILE = process.env.CLUSTER_BENCH_PROFILE
/** `CLUSTER_BENCH_ONLY=short` skips the 500 ms runs; `=slow` runs only them; `=floor` only effect/cluster alone. */
const ONLY = process.env.CLUSTER_BENCH_ONLY
/**
 * `CLUSTER_BENCH_TIMING=1`: the runners record each step of a message's path (src/cluster/Timing.ts) and the
 * one-at-a-time latency is broken down step by step (bench/timing.ts). Recording costs a write per step:
 * take the other figures from a run without it.
 */
const TIMING = process.env.CLUSTER_BENCH_TIMING === "1"
/** `CLUSTER_BENCH_HOP=0`: the runners send runs over effect/cluster's socket only (`--no-hop`, src/cluster/Hop.ts). */
const HOP = process.env.CLUSTER_BENCH_HOP !== "0"
/** `CLUSTER_BENCH_LOCAL=0`: a runner's own sessions' runs go through their effect/cluster entity (`--no-local-runs`). */
const LOCAL_RUNS = process.env.CLUSTER_BENCH_LOCAL !== "0"

const admin = <A>(f: (sql: any) => Effect.Effect<A, any>) => Effect.runPromise(Postgres.withClient(ADMIN, f))

const reachable = async () => {
  try {
    await admin((sql) => sql`SELECT 1`)
    return true
  } catch {
    return false
  }
}

const startRunner = (
  url: string,
  port: number,
  clusterPort: number,
  outbox: string,
  latency: number,
  timing: string | undefined,
  shards: number
) =>
  new Promise<ChildProcess>((resolve, reject) => {
    const child = spawn(process.execPath, [
      ...(PROFILE === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${PROFILE}`]),
      "--import",
      "tsx",
      "src/cluster/runner-main.ts",
      "--postgres",
      url,
      "--port",
      String(port),
      "--cluster-port",
      String(clusterPort),
      "--latency",
      String(latency),
      "--outbox",
      outbox,
      "--shards",
      String(shards),
      "--main-concurrent",
      "8",
      "--drain-timeout",
      "2000",
      ...(HOP ? [] : ["--no-hop"]),
      ...(LOCAL_RUNS ? [] : ["--no-local-runs"])
    ], {
      cwd: root,
      stdio: ["ignore", "pipe", "inherit"],
      env: {
        ...process.env,
        ANTHROPIC_API_KEY: "",
        SWITCHYARD_EXIT_WITH_PARENT: "1",
        ...(timing === undefined ? {} : { SWITCHYARD_TIMING: timing })
      }
    })
    const timer = setTimeout(() => reject(new Error("runner not ready in 60 s")), 60_000)
    child.stdout!.on("data", (d: Buffer) => {
      if (d.toString().includes(`"type":"ready"`)) {
        clearTimeout(timer)
        resolve(child)
      }
    })
  })

/** With `CLUSTER_BENCH_TIMING=1`, the file the runners mark into; the client's marks go there too (bench/timing.ts). */
let timingFile: string | undefined
const clientMark = (session: string, point: string) => {
  if (timingFile !== undefined) {
    fs.appendFileSync(
      timingFile,
      JSON.stringify({ t: Timing.now(), pid: process.pid, id: session, point }) + "\n"
    )
  }
}

const post = async (port: number, session: string, text: string) => {
  clientMark(session, "clientSent")
  const t = performance.now()
  const res = await fetch(`http://127.0.0.1:${port}/sessions/${session}/messages?wait=60000`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ text })
  })
  const body = (await res.json()) as { reply?: unknown }
  if (res.status === 429) return undefined
  if (res.status !== 200 || body.reply === undefined) throw new Error(`status ${res.status}: ${JSON.stringify(body)}`)
  const ms = performance.now() - t
  clientMark(session, "clientGot")
  return ms
}

/**
 * How long the shards' placement must stay the same before a run measures: well above each runner's 1 s read of
 * the runners' registry (ClusterLayer.ts: a runner sees another join or leave within it) and Hop.ts's 1 s read
 * of the shards' owners (1.5 s until session 13; both trees of its A B runs used 2.5 s).
 */
const SETTLED_MS = 2_500

/**
 * Waits until the shards stop moving: every runner holds some (`/status` `cluster.shards`) and no count
 * changed for {@link SETTLED_MS}. A runner that joins takes its shards from the others over a second or so
 * after it is ready (they let them go, it acquires them), and the others learn where they went within
 * Hop.ts's refresh; a message meanwhile waits for its shard or takes a second hop. That is start-up, not
 * what a message costs, so the rows measure after it. Returns how long it took (ms).
 */
const settle = async (ports: ReadonlyArray<number>) => {
  const start = performance.now()
  let last = ""
  let since = start
  while (performance.now() - start < 30_000) {
    const counts = await Promise.all(ports.map(async (port) => {
      const res = await fetch(`http://127.0.0.1:${port}/status`)
      return ((await res.json()) as { cluster: { shards: number } }).cluster.shards
    }))
    const now = performance.now()
    const key = counts.join(" ")
    if (key !== last || counts.some((n) => n === 0)) {
      last = key
      since = now
    } else if (now - since >= SETTLED_MS) return now - start
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  console.log(`(the shards did not settle in 30 s: ${last}; measuring anyway)`)
  return performance.now() - start
}

/** Waits (up to 60 s) until the outbox of the database at `url` has no pending entry; returns how long it took (ms). */
const drained = async (url: string) => {
  const start = performance.now()
  while (performance.now() - start < 60_000) {
    const [row] = await Effect.runPromise(
      Postgres.withClient(
        url,
        (sql) =>
          sql.unsafe<{ n: number }>(`SELECT count(*)::float8 AS n FROM switchyard_outbox WHERE status = 'pending'`)
      )
    )
    if (Number(row.n) === 0) return performance.now() - start
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  console.log(`(the outbox still had pending entries after 60 s; measuring anyway)`)
  return performance.now() - start
}

const percentile = (xs: Array<number>, p: number) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]
}

/** Throughput and one-at-a-time latency through `runners` runner processes. */
const cluster = async (
  runners: number,
  latency = LATENCY,
  messages = MESSAGES,
  sessions = SESSIONS,
  shards = SHARDS
) => {
  const name = `sy_bench_${process.pid}_${runners}`
  await admin((sql) => sql.unsafe(`DROP DATABASE IF EXISTS ${name}`))
  await admin((sql) => sql.unsafe(`CREATE DATABASE ${name}`))
  if (PGLOG !== undefined) await admin((sql) => sql.unsafe(`ALTER DATABASE ${name} SET log_statement = 'all'`))
  const u = new URL(ADMIN)
  u.pathname = `/${name}`
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-bench-"))
  const children: Array<ChildProcess> = []
  const ports: Array<number> = []
  const timing = TIMING && latency === LATENCY ? path.join(dir, "timing.jsonl") : undefined
  timingFile = timing
  try {
    for (let i = 0; i < runners; i++) {
      const port = await freePort()
      ports.push(port)
      children.push(
        await startRunner(u.toString(), port, await freePort(), path.join(dir, "outbox.jsonl"), latency, timing, shards)
      )
    }
    // Let the shard assignment settle, then warm up every runner.
    const settledAfterMs = await settle(ports)
    for (let i = 0; i < 3 * runners; i++) await post(ports[i % runners], `warm${i}`, "warm")
    const samples = latency > 100 ? 2 : LATENCY_SAMPLES
    const printBreakdown = (file: string, prefix: string, when: string) => {
      const b = breakdown(file, prefix)
      table(
        `Where one message's time goes: ${runners} runner(s), ${when}, ${LATENCY} ms turn, median of ${b.samples} samples (ingress to response ${
          b.total.toFixed(1)
        } ms, client to client ${b.client.toFixed(1)} ms; load average ${os.loadavg()[0].toFixed(1)})`,
        b.rows.map((r) => ({ name: r.what, "p50 ms": r.ms, samples: String(r.samples) }))
      )
    }
    /** `samples` messages one at a time to sessions `<prefix>0..4`, round robin over the runners, once nothing waits in the outbox. */
    const oneAtATime = async (prefix: string, url?: string) => {
      const drainedAfterMs = url === undefined ? 0 : await drained(url)
      const latencies: Array<number> = []
      for (let i = 0; i < samples; i++) latencies.push((await post(ports[i % runners], `${prefix}${i % 5}`, "hi"))!)
      return { p50: percentile(latencies, 0.5), p95: percentile(latencies, 0.95), drainedAfterMs }
    }
    const { p50, p95 } = await oneAtATime("lat")
    if (timing !== undefined) printBreakdown(timing, "lat", `${3 * runners} messages after start`)
    const cpuTicksOf = (field: 11 | 12) =>
      children.reduce((sum, c) => {
        const f = fs.readFileSync(`/proc/${c.pid}/stat`, "utf8").split(") ")[1]!.split(" ")
        return sum + Number(f[field]) // utime (field 14) or stime (field 15)
      }, 0)
    const cpuTicks = () => cpuTicksOf(11) + cpuTicksOf(12)
    const commits = async () =>
      Number(
        ((await admin((sql) =>
          sql`SELECT xact_commit::float8 AS n FROM pg_stat_database WHERE datname = ${name}`
        )) as Array<{ n: number }>)[0].n
      )
    let busy = 0
    /** `count` messages from 48 clients to `sessions` sessions named `<prefix><n>`, each to a random runner. */
    const load = async (count: number, prefix: string) => {
      let next = 0
      await Promise.all(Array.from({ length: latency > 100 ? SLOW_CLIENTS : CONCURRENCY }, async () => {
        while (next < count) {
          const i = next++
          while (
            (await post(ports[Math.floor(Math.random() * runners)], `${prefix}${i % sessions}`, `m${i}`)) === undefined
          ) {
            busy++
          }
        }
      }))
    }
    /** One throughput phase: messages/s, runner CPU (all, kernel) and transactions per message. */
    const phase = async (prefix: string) => {
      const sys0 = cpuTicksOf(12)
      const ticks0 = cpuTicks()
      const commits0 = await commits()
      const start = performance.now()
      const startedAt = Date.now()
      await load(messages, prefix)
      const seconds = (performance.now() - start) / 1000
      return {
        startedAt,
        endedAt: Date.now(),
        perSecond: messages / seconds,
        cpuMsPerMessage: ((cpuTicks() - ticks0) * 10) / messages, // 100 ticks per second on Linux
        sysMsPerMessage: ((cpuTicksOf(12) - sys0) * 10) / messages,
        commitsPerMessage: ((await commits()) - commits0) / messages
      }
    }
    // The 20 ms rows: a cold phase (the runners' first messages after the latency samples), then WARM messages
    // per runner, then the warm phase. Each phase has sessions of its own (`c*`, `w*`, `s*`), so both measured
    // phases start from the same history.
    const warmed = latency === LATENCY && WARM > 0
    const cold = warmed ? await phase("c") : undefined
    if (warmed) await load(WARM * runners, "w")
    // One message at a time again, on warm runners: the samples above run on runners that answered 3 messages
    // each (V8 has not compiled their code yet; the single-process row is measured after 640 tasks). First the
    // outbox is delivered (the warm phase leaves a backlog: its claims compete for the 2 cores).
    const warmLatency = warmed ? await oneAtATime("wl", u.toString()) : undefined
    if (warmLatency !== undefined && timing !== undefined) printBreakdown(timing, "wl", "warm")
    const log0 = PGLOG === undefined ? 0 : fs.statSync(PGLOG).size
    // The throughput phase's window on the monotonic clock the runners' profiles use (µs), to cut start-up out.
    const window0 = process.hrtime.bigint() / 1000n
    const measured = await phase("s")
    if (PROFILE !== undefined) {
      fs.appendFileSync(
        path.join(PROFILE, "windows.jsonl"),
        JSON.stringify({
          runners,
          latency,
          pids: children.map((c) => c.pid),
          from: String(window0),
          to: String(process.hrtime.bigint() / 1000n),
          messages
        }) + "\n"
      )
    }
    const { commitsPerMessage, cpuMsPerMessage, perSecond, sysMsPerMessage } = measured
    if (PGLOG !== undefined) {
      const { rows, transactions } = attribute(readStatements(PGLOG, name, log0, fs.statSync(PGLOG).size))
      table(
        `Where the transactions go: ${runners} runner(s), ${latency} ms turn, ${messages} messages (${
          (transactions / messages).toFixed(2)
        } per message logged, ${commitsPerMessage.toFixed(2)} by xact_commit)`,
        rows.map((r) => ({ name: r.name, whose: r.whose, "per message": r.count / messages, example: r.example }))
      )
    }
    // How the measured turns spread over the runners (the sessions' shards decide where a turn runs).
    const spread = await Effect.runPromise(
      Postgres.withClient(u.toString(), (sql) =>
        sql.unsafe<{ runner: string; n: number; sessions: number }>(
          `SELECT runner, count(*)::float8 AS n, count(DISTINCT session)::float8 AS sessions FROM switchyard_turns
         WHERE session ~ '^s[0-9]+$' GROUP BY runner ORDER BY 2 DESC`
        ))
    )
    const turns = spread.reduce((sum, r) => sum + Number(r.n), 0)
    const slots = latency > 100 && spread.length > 0
      ? await slotUse(u.toString(), spread[0].runner, measured.startedAt, measured.endedAt)
      : undefined
    return {
      slots,
      spread: spread.map((r) => `${Number(r.n)} turns of ${Number(r.sessions)} sessions`).join(", "),
      /** The busiest runner's share of the turns: its slots bound the whole cluster's rate. */
      busiestShare: spread.length === 0 ? 1 : Number(spread[0].n) / turns,
      perSecond,
      cold,
      p50,
      p95,
      warmLatency,
      busy,
      settledAfterMs,
      cpuMsPerMessage,
      sysMsPerMessage,
      commitsPerMessage
    }
  } finally {
    for (const c of children) c.kill("SIGTERM")
    await Promise.all(children.map((c) => new Promise((r) => (c.exitCode !== null ? r(undefined) : c.once("exit", r)))))
    await admin((sql) => sql.unsafe(`DROP DATABASE IF EXISTS ${name}`))
    timingFile = undefined
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

/**
 * Where the busiest runner's time went in a throughput phase (`from`..`to`, epoch ms): its turns of the measured
 * sessions (`switchyard_turns`: the handler's start to the model's end, before the commit), how many of its 8
 * slots ran a turn on average over its span (first start to last end), the share of that span with all 8 busy,
 * and the phase's time before its first turn and after its last. The bound of the 500 ms row assumes its 8
 * slots turn over back to back for the whole phase; this says where that does not hold.
 */
const slotUse = async (url: string, runner: string, from: number, to: number) => {
  const rows = await Effect.runPromise(
    Postgres.withClient(url, (sql) =>
      sql.unsafe<{ s: number; e: number }>(
        `SELECT started_at::float8 AS s, ended_at::float8 AS e FROM switchyard_turns
         WHERE session ~ '^s[0-9]+$' AND runner = $1 ORDER BY started_at`,
        [runner]
      ))
  )
  const first = Math.min(...rows.map((r) => Number(r.s)))
  const last = Math.max(...rows.map((r) => Number(r.e)))
  const span = last - first
  const turnMs = rows.reduce((sum, r) => sum + Number(r.e) - Number(r.s), 0)
  // Time with all 8 slots in a turn: sweep the starts and ends.
  const events = rows.flatMap((r) => [[Number(r.s), 1], [Number(r.e), -1]] as const).sort((a, b) =>
    a[0] - b[0] || a[1] - b[1]
  )
  let running = 0
  let full = 0
  let since = first
  for (const [t, d] of events) {
    if (running >= 8) full += t - since
    running += d
    since = t
  }
  return {
    turns: rows.length,
    meanTurnMs: turnMs / rows.length,
    meanBusySlots: turnMs / span,
    fullShare: full / span,
    spanMs: span,
    beforeMs: first - from,
    afterMs: to - last,
    phaseMs: to - from
  }
}

/**
 * The same 20 ms task through the single-process queue: one at a time, and 600 over 50 keys. `model`: the
 * task is what a runner's turn waits for, the scripted model's reply (`ScriptedModel`, `--latency 20`: its
 * text in chunks, a timer for each, so ~2 to 4 ms more than one 20 ms timer under load); otherwise a bare
 * `Effect.sleep(20 ms)`.
 */
const single = (model: boolean) =>
  Effect.runPromise(Effect.scoped(Effect.gen(function*() {
    const q = yield* CommandQueue.make({ lanes: { main: { concurrent: 8, queued: 10_000 } } })
    const scripted = ScriptedModel.make({ latencyMs: LATENCY })
    const task = model
      ? Effect.asVoid(
        scripted.reply({
          system: "You are a helpful assistant.",
          transcript: [{ role: "user", content: "hi" }],
          maxTokens: 1024
        })
      )
      : Effect.sleep(`${LATENCY} millis`)
    const latencies: Array<number> = []
    for (let i = 0; i < LATENCY_SAMPLES; i++) {
      const t = performance.now()
      yield* (yield* q.dispatch("main", `lat${i % 5}`, task)).await
      latencies.push(performance.now() - t)
    }
    const start = performance.now()
    const futures = []
    for (let i = 0; i < MESSAGES; i++) futures.push(yield* q.dispatch("main", `s${i % SESSIONS}`, task))
    for (const f of futures) yield* f.await
    const seconds = (performance.now() - start) / 1000
    return { perSecond: MESSAGES / seconds, p50: percentile(latencies, 0.5), p95: percentile(latencies, 0.95) }
  })))

/**
 * effect/cluster on its own, as a floor: `ClusterQueue.dispatch` + `await` of a handler that returns
 * its command, in this process (one runner, no HTTP, no turn, no coalescing): the persisted Run, its
 * read by the key's runner, the reply. CPU of this process per run, Postgres transactions per run.
 */
const floor = async () => {
  const name = `sy_bench_${process.pid}_floor`
  await admin((sql) => sql.unsafe(`DROP DATABASE IF EXISTS ${name}`))
  await admin((sql) => sql.unsafe(`CREATE DATABASE ${name}`))
  if (PGLOG !== undefined) await admin((sql) => sql.unsafe(`ALTER DATABASE ${name} SET log_statement = 'all'`))
  const u = new URL(ADMIN)
  u.pathname = `/${name}`
  try {
    return await Effect.runPromise(Effect.scoped(
      Effect.gen(function*() {
        const ctx = yield* Layer.build(
          ClusterLayer.layer({ postgres: u.toString(), port: yield* Effect.promise(freePort), shardsPerGroup: 32 })
        )
        const q = yield* ClusterQueue.make({
          handlers: { main: (t) => Effect.succeed(t.command), cron: () => Effect.void, heartbeat: () => Effect.void },
          lanes: { main: { concurrent: 8, queued: 10_000 } }
        }).pipe(Effect.provideContext(ctx as Context.Context<any>))
        const one = (i: number) => Effect.flatMap(q.dispatch("main", `s${i % SESSIONS}`, { i }), (f) => f.await)
        const commits = Effect.promise(() =>
          Effect.runPromise(
            Postgres.withClient(ADMIN, (sql) =>
              sql.unsafe<{ n: number }>(`SELECT xact_commit::float8 AS n FROM pg_stat_database WHERE datname = $1`, [
                name
              ]))
          ).then((rows) =>
            Number(rows[0].n)
          )
        )
        yield* Effect.forEach(Array.from({ length: 100 }, (_, i) => i), one, {
          concurrency: CONCURRENCY,
          discard: true
        })
        const latencies: Array<number> = []
        for (let i = 0; i < LATENCY_SAMPLES; i++) {
          const t = performance.now()
          yield* one(i)
          latencies.push(performance.now() - t)
        }
        const runs = (count: number) =>
          Effect.forEach(Array.from({ length: count }, (_, i) => i), one, { concurrency: CONCURRENCY, discard: true })
        // Cold and warm as the runners' rows: the first 600 runs, then WARM more, then the measured 600.
        const coldCpu0 = process.cpuUsage()
        if (WARM > 0) yield* runs(MESSAGES)
        const coldCpu = process.cpuUsage(coldCpu0)
        if (WARM > 0) yield* runs(WARM)
        const commits0 = yield* commits
        const log0 = PGLOG === undefined ? 0 : fs.statSync(PGLOG).size
        const cpu0 = process.cpuUsage()
        yield* runs(MESSAGES)
        const cpu = process.cpuUsage(cpu0)
        if (PGLOG !== undefined) {
          const { rows, transactions } = attribute(readStatements(PGLOG, name, log0, fs.statSync(PGLOG).size))
          table(
            `Where the transactions go: effect/cluster alone (${(transactions / MESSAGES).toFixed(2)} per run logged)`,
            rows.map((r) => ({ name: r.name, whose: r.whose, "per run": r.count / MESSAGES, example: r.example }))
          )
        }
        return {
          coldCpuMsPerRun: WARM > 0 ? (coldCpu.user + coldCpu.system) / 1000 / MESSAGES : undefined,
          cpuMsPerRun: (cpu.user + cpu.system) / 1000 / MESSAGES,
          commitsPerRun: ((yield* commits) - commits0) / MESSAGES,
          p50: percentile(latencies, 0.5)
        }
      }).pipe(Effect.withTracerEnabled(false))
    ))
  } finally {
    await admin((sql) =>
      sql.unsafe(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${name}' AND pid <> pg_backend_pid()`
      )
    )
    await admin((sql) => sql.unsafe(`DROP DATABASE IF EXISTS ${name}`))
  }
}

if (!(await reachable())) {
  console.log(`Postgres not reachable at ${Postgres.redactUrl(ADMIN)}: cluster benchmark skipped\n`)
} else {
  const sleep = await single(false)
  const local = await single(true)
  const skipShort = ONLY === "slow" || ONLY === "floor"
  const one = skipShort ? undefined : await cluster(1)
  const three = skipShort ? undefined : await cluster(3)
  if (one !== undefined && three !== undefined) {
    const coldOf = (r: typeof one) =>
      r.cold === undefined
        ? "-"
        : `${r.cold.cpuMsPerMessage.toFixed(2)} ms, ${r.cold.commitsPerMessage.toFixed(2)} tx, ${
          r.cold.perSecond.toFixed(0)
        }/s`
    table(
      `Cluster throughput: ${MESSAGES} messages, ${SESSIONS} sessions, ${CONCURRENCY} clients, ${LATENCY} ms scripted turn, lane main concurrent 8 per runner; ${
        WARM > 0 ? `warm: after ${WARM} messages per runner more than cold` : "no warm phase (CLUSTER_BENCH_WARM=0)"
      }`,
      [
        {
          name: "single-process CommandQueue (the scripted model's 20 ms reply)",
          "messages/s": local.perSecond,
          "vs 1 runner": ratio(local.perSecond, one.perSecond),
          "runner CPU ms/message": "-",
          "of which kernel": "-",
          "Postgres transactions/message": "-",
          "cold: the first 600 after start (CPU, tx, rate)": "-"
        },
        {
          name: "cluster, 1 runner",
          "messages/s": one.perSecond,
          "vs 1 runner": "1.00x",
          "runner CPU ms/message": one.cpuMsPerMessage,
          "of which kernel": one.sysMsPerMessage,
          "Postgres transactions/message": one.commitsPerMessage,
          "cold: the first 600 after start (CPU, tx, rate)": coldOf(one)
        },
        {
          name: "cluster, 3 runners",
          "messages/s": three.perSecond,
          "vs 1 runner": ratio(three.perSecond, one.perSecond),
          "runner CPU ms/message": three.cpuMsPerMessage,
          "of which kernel": three.sysMsPerMessage,
          "Postgres transactions/message": three.commitsPerMessage,
          "cold: the first 600 after start (CPU, tx, rate)": coldOf(three)
        }
      ]
    )
    table(`Turn latency one message at a time (POST ... ?wait to reply), ${LATENCY_SAMPLES} samples`, [
      {
        name: "single-process CommandQueue, Effect.sleep(20 ms)",
        "p50 ms": sleep.p50,
        "p95 ms": sleep.p95,
        "added p50 ms": "-",
        "added p50 ms vs the sleep": 0
      },
      {
        name: "single-process CommandQueue, the scripted model's 20 ms reply",
        "p50 ms": local.p50,
        "p95 ms": local.p95,
        "added p50 ms": 0,
        "added p50 ms vs the sleep": local.p50 - sleep.p50
      },
      {
        name: "cluster, 1 runner",
        "p50 ms": one.p50,
        "p95 ms": one.p95,
        "added p50 ms": one.p50 - local.p50,
        "added p50 ms vs the sleep": one.p50 - sleep.p50
      },
      {
        name: "cluster, 3 runners",
        "p50 ms": three.p50,
        "p95 ms": three.p95,
        "added p50 ms": three.p50 - local.p50,
        "added p50 ms vs the sleep": three.p50 - sleep.p50
      },
      ...([[one, 1], [three, 3]] as const).flatMap(([r, n]) =>
        r.warmLatency === undefined ? [] : [{
          name: `cluster, ${n} runner${n === 1 ? "" : "s"}, warm (after the warm phase, the outbox delivered)`,
          "p50 ms": r.warmLatency.p50,
          "p95 ms": r.warmLatency.p95,
          "added p50 ms": r.warmLatency.p50 - local.p50,
          "added p50 ms vs the sleep": r.warmLatency.p50 - sleep.p50
        }]
      )
    ])
  }
  // Where the turn's own wait dominates (a model call), each runner's lane concurrency is the limit.
  if (ONLY !== "slow") {
    const base = await floor()
    table(
      `effect/cluster alone, as a floor: ClusterQueue dispatch + await of a handler that returns its command, one runner in this process (no HTTP, no turn, no coalescing), ${MESSAGES} runs, ${CONCURRENCY} at a time${
        WARM > 0 ? `, after ${MESSAGES} cold and ${WARM} more` : ""
      }`,
      [{
        name: "effect/cluster: persisted Run, its read, its reply",
        "CPU ms/run": base.cpuMsPerRun,
        "Postgres transactions/run": base.commitsPerRun,
        "p50 ms one at a time": base.p50,
        "cold: the first 600 CPU ms/run": base.coldCpuMsPerRun ?? "-"
      }]
    )
  }
  const SLOW = 500
  if (ONLY !== "short" && ONLY !== "floor") {
    const slowOne = await cluster(1, SLOW, SLOW_MESSAGES, SLOW_SESSIONS, SLOW_SHARDS)
    const slowThree = await cluster(3, SLOW, SLOW_MESSAGES, SLOW_SESSIONS, SLOW_SHARDS)
    table(
      `Cluster throughput when the turn waits: ${SLOW_MESSAGES} messages, ${SLOW_SESSIONS} sessions, ${SLOW_SHARDS} shards, ${SLOW_CLIENTS} clients, ${SLOW} ms scripted turn, lane main concurrent 8 per runner`,
      [
        {
          name: "cluster, 1 runner",
          "messages/s": slowOne.perSecond,
          "vs 1 runner": "1.00x",
          "bound (8 slots x runners / 0.5 s)": 16
        },
        {
          name: "cluster, 3 runners",
          "messages/s": slowThree.perSecond,
          "vs 1 runner": ratio(slowThree.perSecond, slowOne.perSecond),
          "bound (8 slots x runners / 0.5 s)": 48
        }
      ]
    )
    const use = (r: typeof slowOne) =>
      r.slots === undefined ?
        "-" :
        `${r.slots.turns} turns, ${r.slots.meanTurnMs.toFixed(0)} ms each (handler start to model end), ${
          r.slots.meanBusySlots.toFixed(2)
        } of 8 slots in a turn on average over its ${(r.slots.spanMs / 1000).toFixed(2)} s span (all 8 for ${
          (100 * r.slots.fullShare).toFixed(0)
        } % of it), first turn ${(r.slots.beforeMs / 1000).toFixed(2)} s after the phase began, last ended ${
          (r.slots.afterMs / 1000).toFixed(2)
        } s before it ended (phase ${(r.slots.phaseMs / 1000).toFixed(2)} s)`
    console.log(`(the busiest runner's slots: 1 runner: ${use(slowOne)}; 3 runners: ${use(slowThree)})`)
    console.log(
      `(where the turns ran, 3 runners: ${slowThree.spread}; the busiest runner's 8 slots bound the cluster to ${
        (16 / slowThree.busiestShare).toFixed(1)
      } messages/s = ${
        ratio(16 / slowThree.busiestShare, slowOne.perSecond)
      } of 1 runner; at 1 runner's own rate per slot, ${
        (1 / slowThree.busiestShare).toFixed(2)
      }x: the busiest runner's share of the turns is where the shards' runners fall on the hash ring, which moves with the runners' ports)\n`
    )
  }
  if (one?.warmLatency !== undefined && three?.warmLatency !== undefined) {
    console.log(
      `(the outbox had no pending entry ${(one.warmLatency.drainedAfterMs / 1000).toFixed(1)} s (1 runner), ${
        (three.warmLatency.drainedAfterMs / 1000).toFixed(1)
      } s (3 runners) after the warm phase's last reply; the warm latency rows measure after that)\n`
    )
  }
  if (one !== undefined && three !== undefined) {
    console.log(
      `(the shards settled ${(one.settledAfterMs / 1000).toFixed(1)} s (1 runner), ${
        (three.settledAfterMs / 1000).toFixed(1)
      } s (3 runners) after the last runner was ready; the rows measure after that)\n`
    )
  }
  console.log(
    `(429 backpressure retries: 1 runner ${one?.busy}, 3 runners ${three?.busy}; load average ${
      os.loadavg().map((l) => l.toFixed(1)).join(" ")
    })\n`
  )
}
