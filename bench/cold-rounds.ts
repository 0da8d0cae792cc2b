/**
 * What a forced collection before a round costs the delivery log (bench/README.md, "Cold rounds"): rounds
 * as `npm run bench -- delivery-log` runs them (a fresh log in its own `Effect.runPromise`, 64 fibers),
 * alternately after a forced double `gc()` (as the bench does before every contender) and without one,
 * printing the process CPU per append of each step of 100 appends per producer. With `--trace-deopt`,
 * the lines with "weak objects" are the compiled functions V8 dropped.
 *
 *   node --expose-gc --import tsx bench/cold-rounds.ts [<tree>]
 *
 * Not a `.bench.ts` file: `npm run bench` does not run it.
 */
import { Effect, type Scope } from "effect"
import * as fs from "node:fs"
import { join, resolve } from "node:path"
import type { DeliveryLog as Log, OutboundMessage } from "../src/delivery/types.js"

interface Opener {
  readonly open: (o: { dir: string }) => Effect.Effect<Log, unknown, Scope.Scope>
}
const tree = resolve(process.argv[2] ?? ".")
const { DeliveryLog } = (await import(join(tree, "src/delivery/index.ts"))) as { DeliveryLog: Opener }
const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error("run with --expose-gc")
const root = join(process.cwd(), ".bench-tmp", "cold-rounds")
fs.rmSync(root, { recursive: true, force: true })
fs.mkdirSync(root, { recursive: true })

const PRODUCERS = 64
const PER = 800
const STEP = 100
const message = (p: number, n: number): OutboundMessage => ({
  channel: "telegram",
  to: `chat-${p}`,
  body: { text: `reply ${n} from producer ${p}: ${"lorem ipsum ".repeat(8)}`, n }
})
let runs = 0
const marks: Array<NodeJS.CpuUsage> = []
/** One producer: its appends one after the other; producer 0 marks the CPU time at every step. */
const producer = (log: Log, p: number) =>
  Effect.gen(function*() {
    for (let n = 0; n < PER; n++) {
      if (p === 0 && n % STEP === 0) marks.push(process.cpuUsage())
      yield* log.append(message(p, n))
    }
  })
const round = () =>
  Effect.runPromise(
    Effect.scoped(
      Effect.flatMap(
        DeliveryLog.open({ dir: join(root, `log-${runs++}`) }),
        (log) =>
          Effect.all(Array.from({ length: PRODUCERS }, (_, p) => producer(log, p)), {
            concurrency: "unbounded",
            discard: true
          })
      )
    )
  )

await round() // warm-up
console.log(`CPU µs per append, each step of ${STEP} appends per producer (${PRODUCERS} producers), ${tree}`)
for (const forced of [true, false, true, false, true, false, true, false]) {
  if (forced) {
    gc()
    gc()
  }
  marks.length = 0
  await round()
  const steps: Array<string> = []
  for (let i = 1; i < marks.length; i++) {
    const a = marks[i - 1]!
    const b = marks[i]!
    steps.push(((b.user - a.user + b.system - a.system) / (PRODUCERS * STEP)).toFixed(1))
  }
  console.log(`${forced ? "after gc()" : "no gc()   "} | ${steps.join(" | ")}`)
}
fs.rmSync(root, { recursive: true, force: true })
