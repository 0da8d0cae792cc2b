/**
 * Before/after of the delivery queue's steady state in one process, rounds alternated (the order
 * reversed every round), so both trees see the same load; `npm run bench -- deliveryQueue` runs one
 * tree per process, and its rows moved 30–60 % between runs of the same tree on the shared machine:
 *
 *   node --import tsx bench/queue-pair.ts /tmp/log-before .
 *
 * Each round: a fresh log per tree, `QUEUE_PAIR_N` (default 20,000; 4,000 with fsync "always")
 * messages to 200 recipients enqueued by 64 producers, `deliver` a no-op, until `idle`, closed: the
 * process CPU per entry (the bench's `DeliveryQueue` column), for fsync "never" and "always",
 * concurrency 8 and 64, `QUEUE_PAIR_ROUNDS` (default 6) rounds each (`QUEUE_PAIR_ONLY=never:64`: that
 * one only). Medians and every round.
 * Not a `.bench.ts` file: `npm run bench` does not run it (it needs a second tree).
 */
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"
import type * as Delivery from "../src/delivery/index.js"

type Module = typeof Delivery
const trees = process.argv.slice(2).map((t) => resolve(t))
if (trees.length === 0) {
  console.error("usage: node --import tsx bench/queue-pair.ts <tree> [<tree>...]")
  process.exit(2)
}
const mods = await Promise.all(trees.map(async (t) => (await import(join(t, "src/delivery/index.ts"))) as Module))
const root = mkdtempSync(join(tmpdir(), "switchyard-queue-pair-"))
let dirs = 0
const ROUNDS = Number(process.env.QUEUE_PAIR_ROUNDS ?? 6)

const messages = (n: number): Array<Delivery.OutboundMessage> =>
  Array.from({ length: n }, (_, i) => ({ channel: "bench", to: `r${i % 200}`, body: { i, text: "hello there" } }))

/** CPU µs per entry of one queue run: open, enqueue everything, deliver, idle, close. */
const queued = async (
  m: Module,
  fsync: "always" | "never",
  msgs: ReadonlyArray<Delivery.OutboundMessage>,
  concurrency: number
) => {
  const c0 = process.cpuUsage()
  await Effect.runPromise(
    Effect.scoped(
      Effect.gen(function*() {
        const log = yield* m.DeliveryLog.open({ dir: join(root, `d${dirs++}`), fsync })
        const q = yield* m.DeliveryQueue.make({ log, deliver: () => Effect.void, concurrency })
        yield* Effect.forEach(msgs, q.enqueue, { concurrency: 64, discard: true })
        yield* q.idle
        const stats = yield* q.stats
        if (stats.delivered !== msgs.length) throw new Error(`delivered ${stats.delivered} of ${msgs.length}`)
      })
    )
  )
  const c = process.cpuUsage(c0)
  return (c.user + c.system) / msgs.length
}

const med = (xs: ReadonlyArray<number>): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!
const started = new Date().toISOString().slice(11, 19)
const load0 = loadavg()[0]!.toFixed(2)
const rows: Array<string> = []
for (const [fsync, n] of [["never", Number(process.env.QUEUE_PAIR_N ?? 20_000)], ["always", 4_000]] as const) {
  const msgs = messages(n)
  for (const concurrency of [8, 64]) {
    const only = process.env.QUEUE_PAIR_ONLY
    if (only !== undefined && only !== `${fsync}:${concurrency}`) continue
    for (const m of mods) await queued(m, fsync, msgs, concurrency) // warm-up, discarded
    const out = mods.map((): Array<number> => [])
    for (let r = 0; r < ROUNDS; r++) {
      const order = mods.map((_, i) => i)
      if (r % 2 === 1) order.reverse()
      for (const i of order) out[i]!.push(await queued(mods[i]!, fsync, msgs, concurrency))
    }
    rows.push(
      `| fsync ${fsync}, ${n.toLocaleString("en-US")} entries, concurrency ${concurrency} | ${
        out.map((xs) => `${med(xs).toFixed(1)} [${xs.map((x) => x.toFixed(0)).join(" ")}]`).join(" | ")
      } |`
    )
  }
}
rmSync(root, { recursive: true, force: true })
console.log(
  `DeliveryQueue, CPU µs per entry (median [rounds]), ${ROUNDS} alternated rounds, ${started}-${
    new Date().toISOString().slice(11, 19)
  } UTC, load average ${load0} -> ${loadavg()[0]!.toFixed(2)}`
)
console.log(`| run | ${trees.join(" | ")} |`)
console.log(`| --- | ${trees.map(() => "---").join(" | ")} |`)
for (const r of rows) console.log(r)
