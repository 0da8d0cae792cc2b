import { Effect, Layer } from "effect"
import * as ClusterLayer from "./src/cluster/ClusterLayer.js"
import * as ClusterQueue from "./src/cluster/ClusterQueue.js"
import * as Postgres from "./src/cluster/Postgres.js"
const db = process.argv[2]
const N = Number(process.argv[3] ?? 2000)
const url = `postgres://postgres@127.0.0.1:5432/${db}`
const prog = Effect.scoped(Effect.gen(function*() {
  const ctx = (yield* Layer.build(ClusterLayer.layer({ postgres: url, port: 39123, shardsPerGroup: 16 }))) as any
  const q = yield* ClusterQueue.make({
    handlers: { main: (t) => Effect.sync(() => { (globalThis as any).hs = performance.now(); return t.command }), cron: (t) => Effect.void, heartbeat: (t) => Effect.void },
    lanes: { main: { concurrent: 16, queued: 1000 } }
  }).pipe(Effect.provideContext(ctx))
  const one = (i: number) => Effect.flatMap(q.dispatch("main", `k${i % 50}`, { i }), (f) => f.await)
  yield* Effect.forEach(Array.from({ length: 200 }, (_, i) => i), one, { concurrency: 16, discard: true })
  const c0 = process.cpuUsage(); const t0 = performance.now()
  yield* Effect.forEach(Array.from({ length: N }, (_, i) => i), one, { concurrency: 16, discard: true })
  const c1 = process.cpuUsage(c0); const t1 = performance.now()
  console.log(`ClusterQueue dispatch+await, concurrency 16: ${((c1.user + c1.system) / N / 1000).toFixed(3)} ms CPU/run (user ${(c1.user / N / 1000).toFixed(3)}), ${(N / ((t1 - t0) / 1000)).toFixed(0)} runs/s`)
  const c2 = process.cpuUsage()
  const lat: Array<number> = []
  const a: Array<number> = [], b: Array<number> = [], c: Array<number> = []
  for (let i = 0; i < 300; i++) {
    const t = performance.now()
    const f = yield* q.dispatch("main", `k${i % 50}`, { i })
    const d = performance.now()
    yield* f.await
    const e = performance.now()
    lat.push(e - t); a.push(d - t); b.push((globalThis as any).hs - d); c.push(e - (globalThis as any).hs)
  }
  const med = (x: Array<number>) => [...x].sort((p, q) => p - q)[Math.floor(x.length / 2)].toFixed(2)
  console.log(`dispatch (durable) ${med(a)} ms, durable -> handler ${med(b)} ms, handler -> await ${med(c)} ms`)
  const c3 = process.cpuUsage(c2)
  lat.sort((a, b) => a - b)
  console.log(`sequential: ${((c3.user + c3.system) / 300 / 1000).toFixed(3)} ms CPU/run, latency p50 ${lat[150].toFixed(2)} p10 ${lat[30].toFixed(2)} p90 ${lat[270].toFixed(2)} ms`)
}))
await Effect.runPromise(prog.pipe(Effect.withTracerEnabled(process.env.TRACE === "1")))
process.exit(0)
