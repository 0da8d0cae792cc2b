import { Effect } from "effect"
import { PgClient } from "@effect/sql-pg"
import * as Postgres from "./src/cluster/Postgres.js"
const N = 3000
const prog = Effect.gen(function*() {
  const sql = yield* PgClient.PgClient
  for (let i = 0; i < 200; i++) yield* sql.unsafe("SELECT $1::int AS x", [i])
  const c0 = process.cpuUsage(); const t0 = performance.now()
  for (let i = 0; i < N; i++) yield* sql.unsafe("SELECT $1::int AS x", [i])
  const c1 = process.cpuUsage(c0); const t1 = performance.now()
  console.log("sequential: cpu us/stmt", ((c1.user + c1.system) / N).toFixed(1), "user", (c1.user/N).toFixed(1), "wall us", ((t1 - t0) * 1000 / N).toFixed(1))
  const c2 = process.cpuUsage()
  yield* Effect.forEach(Array.from({ length: N }, (_, i) => i), (i) => sql.unsafe("SELECT $1::int AS x", [i]), { concurrency: 8, discard: true })
  const c3 = process.cpuUsage(c2)
  console.log("8 concurrent: cpu us/stmt", ((c3.user + c3.system) / N).toFixed(1))
  const c4 = process.cpuUsage()
  for (let i = 0; i < 1000; i++) yield* sql.withTransaction(Effect.andThen(sql.unsafe("SELECT $1::int AS x", [i]), sql.unsafe("SELECT 2")))
  const c5 = process.cpuUsage(c4)
  console.log("tx of 2: cpu us/tx", ((c5.user + c5.system) / 1000).toFixed(1))
}).pipe(Effect.provide(Postgres.layer("postgres://postgres@127.0.0.1:5432/test", { maxConnections: 8 })))
await Effect.runPromise(prog)
