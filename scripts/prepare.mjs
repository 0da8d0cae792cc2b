// npm runs `prepare` after `npm ci` or `npm install` in a clone, and when switchyard is installed
// from git (there in a clone of its own, with the dev dependencies): it builds dist/, where the
// package's `exports` point. Without the TypeScript compiler (`npm ci --omit=dev`) there is nothing
// to build with: one line says so and the install goes on. A failed build fails the install.
import { spawnSync } from "node:child_process"
import { createRequire } from "node:module"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
let tsc
try {
  // the native compiler, TypeScript 7, installed as `typescript-native` (`typescript` is 5.9, for the lint tools)
  tsc = path.join(path.dirname(createRequire(import.meta.url).resolve("typescript-native/package.json")), "bin", "tsc")
} catch {
  console.log(
    "switchyard: typescript is not installed (dev dependencies omitted), dist/ not built; run `npm run build` after installing it"
  )
  process.exit(0)
}
const build = spawnSync(process.execPath, [tsc, "-p", path.join(root, "tsconfig.build.json")], {
  cwd: root,
  stdio: "inherit"
})
if (build.error !== undefined) throw build.error
process.exit(build.status ?? 1)
