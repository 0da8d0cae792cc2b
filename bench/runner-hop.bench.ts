/**
 * What one runner-to-runner hop costs, and why a hop inside the cluster bench takes milliseconds: one
 * small request at a time between two processes on this machine, over loopback TCP, three ways:
 * - raw `node:net`: the request's bytes echoed back;
 * - effect/rpc over `@effect/platform-node` sockets with the binary serialization the runners use
 *   (`RpcSerialization.layerSchemaBinary`), one RPC echoing its payload;
 * - effect/cluster alone: two runner processes (src/cluster/ClusterLayer.ts, real Postgres), a trivial
 *   entity with one volatile request (the ingress's `RunNow` payload), sent to keys the other runner
 *   owns (remote) and to keys this one owns (local).
 * Each back to back ("hot") and with 25 ms idle before each request ("idle": what a turn leaves between a
 * run and its reply), raw and effect/rpc with and without `TCP_NODELAY`. Round trip median and p90, and
 * the CPU of both processes per request (background work included: with the idle gap that is most of it
 * for the runners). `npm run bench -- hop`; Postgres as for the cluster bench (its row is skipped without).
 */
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import * as NodeSocketServer from "@effect/platform-node/NodeSocketServer"
import { Effect, Layer, Schema } from "effect"
import type { Context } from "effect"
import { Entity } from "effect/cluster"
import { Rpc, RpcClient, RpcGroup, RpcSerialization, RpcServer } from "effect/rpc"
import { Socket } from "effect/socket/Socket"
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as ClusterLayer from "../src/cluster/ClusterLayer.js"
import * as Postgres from "../src/cluster/Postgres.js"
import { Run } from "../src/cluster/protocol.js"
import { freePort, table } from "./lib.js"

const ADMIN = process.env.SWITCHYARD_TEST_PG ?? "postgres://postgres@127.0.0.1:5432/test"
const HOT_ROUNDS = Number(process.env.HOP_ROUNDS ?? 2000)
const IDLE_ROUNDS = Math.max(20, Math.round(HOT_ROUNDS / 8))
const IDLE_MS = 25
const KEYS = 32

const payload = {
  runId: "msg:lat17:0000000000001",
  lane: "main",
  key: "lat17",
  generation: 0,
  command: { type: "message", session: "lat17", text: "hello there", inbox: true },
  admittedAt: 1_764_650_000_000,
  coalesceSlot: 1
}
const fields = Run.payloadSchema.fields
class EchoRpcs extends RpcGroup.make(Rpc.make("Echo", { payload: fields, success: Schema.Unknown })) {}
const EchoEntity = Entity.make("hop/Echo", [Rpc.make("Echo", { payload: fields, success: Schema.Unknown })])
const entityHandlers = EchoEntity.toLayer(Effect.succeed({ Echo: () => Effect.succeed({ pid: process.pid }) }))
const clusterRuntime = (url: string, port: number) =>
  Layer.provideMerge(entityHandlers, ClusterLayer.layer({ postgres: url, port, shardsPerGroup: KEYS }))

const cpuMsOf = (pid: number) => {
  const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return (Number(f[11]) + Number(f[12])) * 10 // utime + stime, 100 ticks per second
}
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms))

interface Figures {
  readonly p50: number
  readonly p90: number
  readonly cpuMs: number
}
/** `rounds` requests one at a time (after `idleMs` each), timed; CPU of this process and `peer`. */
const timed = async (peer: number, rounds: number, idleMs: number, one: () => Promise<unknown>): Promise<Figures> => {
  for (let i = 0; i < 200; i++) await one()
  const times: Array<number> = []
  const cpu0 = process.cpuUsage()
  const peer0 = cpuMsOf(peer)
  for (let i = 0; i < rounds; i++) {
    if (idleMs > 0) await pause(idleMs)
    const t = performance.now()
    await one()
    times.push(performance.now() - t)
  }
  const cpu = process.cpuUsage(cpu0)
  const s = times.sort((a, b) => a - b)
  return {
    p50: s[Math.floor(s.length / 2)]!,
    p90: s[Math.floor(s.length * 0.9)]!,
    cpuMs: ((cpu.user + cpu.system) / 1000 + cpuMsOf(peer) - peer0) / rounds
  }
}

const child = (args: Array<string>) =>
  new Promise<{ readonly pid: number; readonly line: string; readonly kill: () => void }>((resolve, reject) => {
    const c = spawn(process.execPath, ["--import", "tsx", import.meta.filename, ...args], {
      stdio: ["ignore", "pipe", "inherit"]
    })
    c.once("exit", (code) => reject(new Error(`${args[0]} exited with ${code}`)))
    c.stdout!.once("data", (d) => resolve({ pid: c.pid!, line: String(d).trim(), kill: () => c.kill("SIGKILL") }))
  })

const raw = async (noDelay: boolean, rounds: number, idleMs: number) => {
  const server = await child(["raw-server", noDelay ? "1" : "0"])
  const c = net.createConnection({ port: Number(server.line), host: "127.0.0.1", noDelay })
  await new Promise((r) => c.once("connect", r))
  const frame = Buffer.from(JSON.stringify(payload))
  let answered: () => void = () => {}
  c.on("data", () => answered())
  try {
    return await timed(server.pid, rounds, idleMs, () =>
      new Promise<void>((r) => {
        answered = r
        c.write(frame)
      }))
  } finally {
    c.destroy()
    server.kill()
  }
}

const rpc = async (noDelay: boolean, rounds: number, idleMs: number) => {
  const port = await freePort()
  const server = await child(["rpc-server", String(port), noDelay ? "1" : "0"])
  const protocol = Layer.effect(RpcClient.Protocol)(
    Effect.flatMap(
      NodeSocket.makeNet({ host: "127.0.0.1", port, noDelay }),
      (s) => Effect.provideService(RpcClient.makeProtocolSocket(), Socket, s)
    )
  ).pipe(Layer.provide(RpcSerialization.layerSchemaBinary()))
  try {
    return await Effect.runPromise(Effect.scoped(
      Effect.gen(function*() {
        const client = yield* RpcClient.make(EchoRpcs)
        return yield* Effect.promise(() =>
          timed(server.pid, rounds, idleMs, () => Effect.runPromise(client.Echo(payload)))
        )
      }).pipe(Effect.provide(protocol))
    ))
  } finally {
    server.kill()
  }
}

/** effect/cluster, local and remote, hot and idle; undefined without Postgres. */
const cluster = async () => {
  const admin = <A>(f: (sql: any) => Effect.Effect<A, any>) => Effect.runPromise(Postgres.withClient(ADMIN, f))
  try {
    await admin((sql) => sql`SELECT 1`)
  } catch {
    return undefined
  }
  const name = `sy_hop_${process.pid}`
  await admin((sql) => sql.unsafe(`DROP DATABASE IF EXISTS ${name}`))
  await admin((sql) => sql.unsafe(`CREATE DATABASE ${name}`))
  const u = new URL(ADMIN)
  u.pathname = `/${name}`
  const url = u.toString()
  const peer = await child(["cluster-peer", url, String(await freePort())])
  try {
    return await Effect.runPromise(Effect.scoped(
      Effect.gen(function*() {
        const ctx = yield* Layer.build(clusterRuntime(url, yield* Effect.promise(freePort)))
        const makeClient = yield* Effect.provideContext(EchoEntity.client, ctx as Context.Context<any>)
        const clients = Array.from({ length: KEYS }, (_, i) => makeClient(`k${i}`))
        const send = (i: number) =>
          Effect.map(clients[i]!.Echo({ ...payload, key: `k${i}` }), (r) => (r as { pid: number }).pid)
        // Until the shards are spread over both runners and stay put: every key answered twice by the same runner.
        let owners: Array<number> = []
        for (let tries = 0; owners.length === 0; tries++) {
          if (tries === 200) return yield* Effect.die(new Error("the shards never spread over both runners"))
          const a = yield* Effect.forEach(clients, (_, i) => send(i))
          const b = yield* Effect.forEach(clients, (_, i) => send(i))
          if (a.join() === b.join() && a.includes(peer.pid) && a.includes(process.pid)) owners = a
          else yield* Effect.sleep("250 millis")
        }
        const keysOf = (pid: number) => owners.flatMap((o, i) => (o === pid ? [i] : []))
        const run = (keys: Array<number>, rounds: number, idleMs: number) => {
          let n = 0
          return Effect.promise(() =>
            timed(
              peer.pid,
              rounds,
              idleMs,
              () =>
                Effect.runPromise(Effect.flatMap(send(keys[n++ % keys.length]!), (pid) =>
                  pid === owners[keys[(n - 1) % keys.length]!]
                    ? Effect.void
                    : Effect.die(new Error("a shard moved during the measurement"))))
            )
          )
        }
        const local = keysOf(process.pid)
        const remote = keysOf(peer.pid)
        return {
          localHot: yield* run(local, HOT_ROUNDS, 0),
          remoteHot: yield* run(remote, HOT_ROUNDS, 0),
          localIdle: yield* run(local, IDLE_ROUNDS, IDLE_MS),
          remoteIdle: yield* run(remote, IDLE_ROUNDS, IDLE_MS)
        }
      }).pipe(Effect.withTracerEnabled(false))
    ))
  } finally {
    peer.kill()
    await pause(200)
    await admin((sql) =>
      sql.unsafe(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${name}' AND pid <> pg_backend_pid()`
      )
    )
    await admin((sql) => sql.unsafe(`DROP DATABASE IF EXISTS ${name}`))
  }
}

const role = process.argv[2]
if (role === "raw-server") {
  const server = net.createServer({ noDelay: process.argv[3] === "1" }, (c) => c.on("data", (d) => c.write(d)))
  server.listen(0, "127.0.0.1", () => console.log(String((server.address() as net.AddressInfo).port)))
} else if (role === "rpc-server") {
  const server = RpcServer.layer(EchoRpcs).pipe(
    Layer.provide(EchoRpcs.toLayer({ Echo: (p) => Effect.succeed(p) })),
    Layer.provide(RpcServer.layerProtocolSocketServer),
    Layer.provide(
      NodeSocketServer.layer({ port: Number(process.argv[3]), host: "127.0.0.1", noDelay: process.argv[4] === "1" })
    ),
    Layer.provide(RpcSerialization.layerSchemaBinary())
  )
  Effect.runFork(
    Effect.scoped(Effect.andThen(
      Layer.build(server),
      Effect.andThen(Effect.sync(() => console.log("ready")), Effect.never)
    ))
  )
} else if (role === "cluster-peer") {
  Effect.runFork(
    Effect.scoped(
      Effect.andThen(
        Layer.build(clusterRuntime(process.argv[3]!, Number(process.argv[4]))),
        Effect.andThen(Effect.sync(() => console.log("ready")), Effect.never)
      )
    )
  )
} else {
  const rows: Array<{ name: string } & Record<string, string | number>> = []
  const row = (name: string, hot: Figures, idle: Figures) =>
    rows.push({
      name,
      "hot p50 ms": hot.p50,
      "hot p90 ms": hot.p90,
      "hot CPU ms/request": hot.cpuMs,
      [`${IDLE_MS} ms idle: p50 ms`]: idle.p50,
      "idle p90 ms": idle.p90,
      "idle CPU ms/request": idle.cpuMs
    })
  const load0 = os.loadavg()[0]
  for (const noDelay of [false, true]) {
    row(
      `raw node:net${noDelay ? ", noDelay" : ""}`,
      await raw(noDelay, HOT_ROUNDS, 0),
      await raw(noDelay, IDLE_ROUNDS, IDLE_MS)
    )
    row(
      `effect/rpc, binary serialization${noDelay ? ", noDelay" : ""}`,
      await rpc(noDelay, HOT_ROUNDS, 0),
      await rpc(noDelay, IDLE_ROUNDS, IDLE_MS)
    )
  }
  const c = await cluster()
  if (c === undefined) {
    console.log(`Postgres not reachable at ${Postgres.redactUrl(ADMIN)}: the effect/cluster rows skipped\n`)
  } else {
    row("effect/cluster volatile request, local (same runner)", c.localHot, c.localIdle)
    row("effect/cluster volatile request, remote (the other runner's socket)", c.remoteHot, c.remoteIdle)
  }
  table(
    `One request at a time between two processes, round trip: ${HOT_ROUNDS} back to back, ${IDLE_ROUNDS} with ${IDLE_MS} ms idle before each (load average ${
      load0.toFixed(1)
    } to ${os.loadavg()[0].toFixed(1)}, ${os.cpus().length} cores)`,
    rows
  )
  process.exit(0)
}
