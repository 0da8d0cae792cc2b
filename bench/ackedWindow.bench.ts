/**
 * `npm run bench -- ackedWindow`: the dedupe window's id set (src/delivery/ackedWindow.ts) against
 * the `Map` of `{ at, bytes }` it replaced: CPU per id of add + lookup + evict, 500k random UUIDs
 * (1,024 acks a millisecond), 3 alternated rounds.
 */
import { randomUUID } from "node:crypto"
import { AckedWindow } from "../src/delivery/ackedWindow.js"
import { ratio, table } from "./lib.js"

const N = 500_000
const ids = Array.from({ length: N }, () => randomUUID())
const rows = []
for (let r = 0; r < 3; r++) {
  let found = 0
  let t = process.cpuUsage()
  const m = new Map<string, { at: number; bytes: number }>()
  for (let i = 0; i < N; i++) m.set(ids[i]!, { at: i >> 10, bytes: 80 })
  for (let i = 0; i < N; i++) if (m.has(ids[i]!)) found++
  for (const [id, a] of m) {
    if (a.at > 1e9) break
    m.delete(id)
  }
  let c = process.cpuUsage(t)
  const mapUs = (c.user + c.system) / N
  t = process.cpuUsage()
  const w = new AckedWindow()
  for (let i = 0; i < N; i++) w.add(ids[i]!, i >> 10, undefined, 80)
  for (let i = 0; i < N; i++) if (w.has(ids[i]!)) found++
  w.evict(1e12, 1, () => {})
  c = process.cpuUsage(t)
  const windowUs = (c.user + c.system) / N
  if (found !== 2 * N) throw new Error(`found ${found} of ${2 * N}`)
  rows.push({
    name: `round ${r + 1}`,
    "Map µs/id": mapUs,
    "AckedWindow µs/id": windowUs,
    "AckedWindow / Map": ratio(windowUs, mapUs)
  })
}
table(`add + has + evict of ${N.toLocaleString("en-US")} acked ids, CPU per id`, rows)
