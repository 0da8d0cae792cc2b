/**
 * The CPU of one compaction of a log that acks what it delivers (as the kept-open row's log does
 * between its rounds), for the tree given (its built JavaScript, `npm run build`), in a process of its
 * own; run it for two trees in turn to compare them:
 *
 *   for t in /tmp/log-before . /tmp/log-before .; do node --import tsx bench/compaction-cpu.ts $t; done
 *
 * Rounds of 25,600 appends (64 recipients, the bench's message, fsync "always") of which 22,000 are
 * then acked, and a `compact` each: the window of acked ids grows by 22,000 a round (the default 24 h
 * dedupe window keeps them all), so each compaction rewrites more of them, as a long-lived log's do.
 * Prints the process's CPU (all threads) of each `compact`. Not a `.bench.ts` file.
 */
import { Effect, Exit, Scope } from "effect"
import * as fs from "node:fs"
import { loadavg } from "node:os"
import { join, resolve } from "node:path"
import type { DeliveryLog, OutboundMessage } from "../src/delivery/types.js"

const tree = resolve(process.argv[2] ?? ".")
const { DeliveryLog: Log } = (await import(join(tree, "dist/delivery/index.js"))) as {
  DeliveryLog: { open: (o: { dir: string }) => Effect.Effect<DeliveryLog, unknown, Scope.Scope> }
}
const ROUNDS = Number(process.env.COMPACTION_CPU_ROUNDS ?? 8)
const dir = join(process.cwd(), ".bench-tmp", `compaction-cpu-${process.pid}`)
fs.rmSync(dir, { recursive: true, force: true })
fs.mkdirSync(dir, { recursive: true })
const scope = Effect.runSync(Scope.make())
const log = await Effect.runPromise(Scope.provide(scope)(Log.open({ dir })))
const message = (n: number): OutboundMessage => ({
  channel: "telegram",
  to: `chat-${n % 64}`,
  body: { text: `reply ${n} from producer ${n % 64}: ${"lorem ipsum ".repeat(8)}`, n }
})
const started = new Date().toISOString().slice(11, 19)
const load0 = loadavg()[0]!.toFixed(2)
const ms: Array<number> = []
for (let r = 0; r < ROUNDS; r++) {
  const entries = await Effect.runPromise(
    Effect.forEach(Array.from({ length: 25_600 }, (_, i) => i), (i) => log.append(message(i)), { concurrency: 64 })
  )
  await Effect.runPromise(
    Effect.forEach(entries.slice(0, 22_000), (e) => log.ack(e.id), { concurrency: 64, discard: true })
  )
  const c0 = process.cpuUsage()
  await Effect.runPromise(log.compact)
  const c = process.cpuUsage(c0)
  ms.push((c.user + c.system) / 1000)
}
await Effect.runPromise(Scope.close(scope, Exit.void))
fs.rmSync(dir, { recursive: true, force: true })
console.log(
  `${tree}: CPU ms per compaction (all threads), ${ROUNDS} rounds: ${ms.map((m) => m.toFixed(0)).join(" ")}; total ${
    ms.reduce((a, b) => a + b, 0).toFixed(0)
  } (${started}-${new Date().toISOString().slice(11, 19)} UTC, load ${load0} -> ${loadavg()[0]!.toFixed(2)})`
)
