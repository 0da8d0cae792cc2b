/**
 * The long DeliveryQueue crash test (`npm run crash:queue [-- campaigns]`, default 10): each campaign
 * runs a child that enqueues 200 entries over the real file log, then kills it and its successors with
 * SIGKILL after a random number of deliveries, 8 times, and checks that every enqueued entry was
 * delivered at least once, in seq order per recipient, repeats only right after a kill.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { campaign } from "../test/delivery/fixtures/queueCrashHarness.js"

const campaigns = Number(process.argv[2] ?? 10)
const root = mkdtempSync(join(tmpdir(), "switchyard-crash-queue-"))
const random = (lo: number, hi: number) => lo + Math.floor(Math.random() * (hi - lo + 1))

let failed = 0
try {
  for (let c = 0; c < campaigns; c++) {
    const kills = [random(1, 120), ...Array.from({ length: 7 }, () => random(1, 25))]
    try {
      const r = await campaign(join(root, `c${c}`), kills)
      if (r.final !== "done 0 0") throw new Error(`the last run ended with \`${r.final}\``)
      console.log(
        `campaign ${
          c + 1
        }/${campaigns}: ${r.kills} kills, ${r.enqueued} enqueued, ${r.deliveries} deliveries, ${r.redeliveries} repeats after a kill: ok`
      )
    } catch (e) {
      failed++
      console.log(`campaign ${c + 1}/${campaigns}: FAILED: ${e instanceof Error ? e.message : String(e)}`)
    }
  }
} finally {
  rmSync(root, { recursive: true, force: true })
}
process.exit(failed === 0 ? 0 : 1)
