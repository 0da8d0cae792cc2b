/**
 * `npm run bench -- ackedWindow`: the dedupe window's id set (src/delivery/ackedWindow.ts) against
 * the `Map` of `{ at, bytes }` it replaced: CPU per id of add + lookup + evict, 500k random UUIDs
 * (1,024 acks a millisecond), 3 alternated rounds; then the same for keyed entries (the keyed ring
 * against the `Map`s of whole entries and keys it replaced).
 */
import { randomUUID } from "node:crypto"
import { AckedWindow } from "../src/delivery/ackedWindow.js"
import { EntryData } from "../src/delivery/entryData.js"
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

// Keyed entries: the keyed ring (a key digest + the record's place, read back on a hit) against the
// `Map` of whole entries plus the key -> id `Map` it replaced. A hit's read here is an array lookup
// (in the log it is a pread of the record, ~5-10 µs, paid only by a repeated key); the lookup of a
// key not acked (what every fresh keyed append asks) is the digest and one probe.
const entries = ids.map(
  (id, i) =>
    new EntryData(
      id,
      i + 1,
      i,
      `reply:session-${i % 5000}:turn-${i}`,
      `{"channel":"telegram","to":"chat-${i % 64}","body":{"text":"reply ${i}"}}`,
      0,
      undefined,
      undefined,
      "pending",
      true,
      250
    )
)
const keyedRows = []
for (let r = 0; r < 3; r++) {
  let found = 0
  let t = process.cpuUsage()
  const kept = new Map<string, { at: number; entry: EntryData; bytes: number }>()
  const keys = new Map<string, string>()
  for (let i = 0; i < N; i++) {
    kept.set(ids[i]!, { at: i >> 10, entry: entries[i]!, bytes: 250 })
    keys.set(entries[i]!.key!, ids[i]!)
  }
  for (let i = 0; i < N; i++) if (kept.get(keys.get(entries[i]!.key!)!)?.entry === entries[i]) found++
  for (let i = 0; i < N; i++) if (keys.has(`fresh:${i}`)) found--
  for (const [id, k] of kept) {
    if (k.at > 1e9) break
    kept.delete(id)
    keys.delete(k.entry.key!)
  }
  let c = process.cpuUsage(t)
  const mapUs = (c.user + c.system) / N
  t = process.cpuUsage()
  const w = new AckedWindow()
  for (let i = 0; i < N; i++) w.addKeyed(entries[i]!, i >> 10, 1, i)
  const read = (_file: number, offset: number): EntryData => entries[offset]!
  for (let i = 0; i < N; i++) if (w.findKey(entries[i]!.key!, read)?.id === ids[i]) found++
  for (let i = 0; i < N; i++) if (w.findKey(`fresh:${i}`, read) !== undefined) found--
  w.evict(1e12, 1, () => {})
  c = process.cpuUsage(t)
  const ringUs = (c.user + c.system) / N
  if (found !== 2 * N) throw new Error(`keyed: found ${found} of ${2 * N}`)
  keyedRows.push({
    name: `round ${r + 1}`,
    "Map µs/entry": mapUs,
    "keyed ring µs/entry": ringUs,
    "ring / Map": ratio(ringUs, mapUs)
  })
}
table(
  `keyed: add + hit (read back from an array) + miss + evict of ${
    N.toLocaleString("en-US")
  } acked keyed entries, CPU per entry`,
  keyedRows
)
