/**
 * `npm run bench [-- name...]`: runs every benchmark in bench/ (one file per question, `*.bench.ts`),
 * each in its own Node process so heaps and JIT state do not leak between them, and prints
 * their side-by-side tables. With names, runs only the benchmarks whose file name contains one.
 */
import { spawnSync } from "node:child_process"
import { readdirSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
const wanted = process.argv.slice(2)
const files = readdirSync(here)
  .filter((f) => f.endsWith(".bench.ts"))
  .filter((f) => wanted.length === 0 || wanted.some((w) => f.includes(w)))
  .sort()

console.log(`# switchyard benchmarks — node ${process.version}, ${new Date().toISOString()}\n`)
let failed = 0
for (const file of files) {
  console.log(`## ${file}\n`)
  const r = spawnSync(process.execPath, ["--expose-gc", "--import", "tsx", join(here, file)], { stdio: "inherit" })
  if (r.status !== 0) {
    failed++
    console.log(`(${file} exited with ${r.status ?? r.signal})\n`)
  }
}
process.exit(failed === 0 ? 0 : 1)
