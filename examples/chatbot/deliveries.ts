/** `npm run chat -- deliveries`: what the delivery log of a state folder holds (pending and dead), and the counts. */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { exitAfterFlush } from "../../src/agent/index.js"
import { DeliveryLog } from "../../src/delivery/index.js"
import type { DeliveryEntry } from "../../src/delivery/index.js"
import type { DeliveriesOptions } from "./cli.js"

const row = (entry: DeliveryEntry) => ({
  id: entry.id,
  status: entry.status,
  recipient: `${entry.message.channel}:${entry.message.to}`,
  attempts: entry.attempts,
  ...(entry.lastError === undefined ? {} : { lastError: entry.lastError })
})

const show = (entries: ReadonlyArray<DeliveryEntry>, title: string): Array<string> =>
  entries.length === 0
    ? []
    : [
      `${title}:`,
      ...entries.map((e) =>
        `  ${e.id}  ${e.message.channel}:${e.message.to}  attempts ${e.attempts}${
          e.lastError === undefined ? "" : `  last error: ${e.lastError}`
        }`
      )
    ]

/** Prints the log of `--state-dir` (and puts dead entries back with `--retry-dead`); exits 0, or 1 on an error. */
export const runDeliveries = (options: DeliveriesOptions): void => {
  const dir = path.join(path.resolve(options.stateDir), "deliveries")
  const program = Effect.gen(function*() {
    // Nothing to show, and nothing is created, when the folder does not exist.
    const exists = fs.existsSync(dir)
    const log = exists ? yield* DeliveryLog.open({ dir }) : undefined
    let retried = 0
    if (log !== undefined && options.retryDead) {
      for (const entry of yield* log.dead) {
        yield* log.requeue(entry.id)
        retried++
      }
    }
    const pending = log === undefined ? [] : yield* log.pending
    const dead = log === undefined ? [] : yield* log.dead
    if (options.json) {
      process.stdout.write(
        JSON.stringify({
          pending: pending.map(row),
          dead: dead.map(row),
          counts: { pending: pending.length, dead: dead.length },
          retried
        }) + "\n"
      )
    } else {
      const lines = [...show(pending, "pending"), ...show(dead, "dead")]
      if (retried > 0) lines.push(`${retried} dead entr${retried === 1 ? "y" : "ies"} put back to pending`)
      lines.push(`pending ${pending.length}, dead ${dead.length}`)
      process.stdout.write(lines.join("\n") + "\n")
    }
    return 0
  }).pipe(
    Effect.scoped,
    Effect.catch((error: { readonly message: string }) =>
      Effect.sync(() => {
        process.stderr.write(`error: ${error.message}\n`)
        return 1
      })
    )
  )
  Effect.runPromise(program).then(exitAfterFlush, (cause) => {
    process.stderr.write(`error: ${String(cause)}\n`)
    exitAfterFlush(1)
  })
}
