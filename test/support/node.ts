/**
 * How a test starts one of the repository's TypeScript programs in a child `node`: the arguments
 * before the program's own. Under `vitest run` the sources of this run are compiled once
 * (test/support/compileOnce.ts) and the child runs the JavaScript with plain `node`; otherwise (a
 * script run on its own, e.g. `npm run crash:log`) it runs the TypeScript under tsx, as `npm run`
 * does. Either way the program is the same source: what a test of `npm run chat` starts is
 * examples/chatbot/main.ts. `npm run --silent chat` itself, through tsx, is started by
 * test/e2e/chatbot.cli.test.ts.
 */
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")

/**
 * `node` arguments that run `file` (a .ts file of the repository: absolute, or relative to its root):
 * `[<compiled>.js]`, or `["--import", "tsx", file]`.
 *
 * Source maps stay off in the compiled case: with them on (as tsx turns them on) Node also reads the
 * .js.map of every effect module it loads: the chatbot's `--version`, compiled, is 1.83 billion
 * instructions without them and 2.45 with them (callgrind; 0.88 and 1.21 since it loads effect's
 * modules, not its index). A child's stack trace then names the compiled .js; its file has
 * an inline map, so `NODE_OPTIONS=--enable-source-maps` (for children that keep the environment) or
 * `SWITCHYARD_TEST_TSX=1` gives the .ts lines.
 */
export const nodeArgs = (file: string): Array<string> => {
  const compiled = process.env.SWITCHYARD_TEST_JS
  if (compiled === undefined || compiled === "") return ["--import", "tsx", file]
  const relative = path.relative(ROOT, path.resolve(ROOT, file))
  if (relative.startsWith("..") || !relative.endsWith(".ts")) {
    throw new Error(`Expected a .ts file of the repository, got ${file}`)
  }
  return [path.join(compiled, relative.replace(/\.ts$/, ".js"))]
}
