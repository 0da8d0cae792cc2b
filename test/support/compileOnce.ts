/**
 * vitest's globalSetup: compiles the repository's TypeScript (src/, examples/, scripts/, test/) to
 * JavaScript once per test run, in a temporary folder that mirrors the repository's layout, so a test
 * that starts one of the programs in a child process (the chatbot, a runner, a crash fixture) runs
 * plain `node` on it instead of `node --import tsx`, which loads every module through tsx's hooks
 * (the chatbot's `--version`: 1.85 s of CPU under tsx, 0.55 s compiled).
 *
 * The compiler is esbuild, in the version range tsx 4 itself depends on (`~0.28.0`), with the options
 * tsx gives it (tsx transforms each file with esbuild: the same target, `keepNames`, the same
 * tsconfig.json), file by file, not bundled: the child loads the same modules, in the same layout,
 * from the same sources of this run. `node_modules` and `package.json` in the folder are links to the
 * repository's. Compiled again when vitest re-runs (watch mode). A test finds the folder through
 * `SWITCHYARD_TEST_JS` (see `nodeArgs` in node.ts); without it (a file run some other way, or
 * `SWITCHYARD_TEST_TSX=1`) the children run under tsx, as before.
 */
import { buildSync } from "esbuild"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")

/** The folders compiled: every program a test starts lives in one of them, with all it imports. */
const SOURCES = ["src", "examples", "scripts", "test"]

const typescriptFiles = (dir: string, out: Array<string>): Array<string> => {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name)
    if (entry.isDirectory()) typescriptFiles(file, out)
    // Not the test files: no child runs one.
    else if (entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts") && !entry.name.endsWith(".test.ts")) {
      out.push(file)
    }
  }
  return out
}

/** Compiles the sources into `outDir` (which it fills; it must exist). Throws with esbuild's errors. */
export const compile = (outDir: string): void => {
  const files = SOURCES.flatMap((dir) => typescriptFiles(path.join(ROOT, dir), []))
  buildSync({
    absWorkingDir: ROOT,
    entryPoints: files,
    outdir: outDir,
    outbase: ROOT,
    bundle: false,
    format: "esm",
    platform: "node",
    // As tsx (4.x) transforms a file: target the running node, keep function and class names,
    // minified whitespace, a source map without the sources (so a child's stack trace names the .ts
    // file and line).
    target: `node${process.versions.node}`,
    keepNames: true,
    minifyWhitespace: true,
    sourcemap: "inline",
    sourcesContent: false,
    logLevel: "silent"
  })
}

export default function setup(project: { onTestsRerun: (callback: () => void) => void }) {
  // `SWITCHYARD_TEST_TSX=1 npx vitest run`: every child runs under tsx, as before (to compare).
  if (process.env.SWITCHYARD_TEST_TSX === "1") return
  const outDir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-test-js-"))
  // Readable by all, as the repository is: a test runs a fixture as the user `nobody`.
  fs.chmodSync(outDir, 0o755)
  fs.symlinkSync(path.join(ROOT, "node_modules"), path.join(outDir, "node_modules"))
  fs.symlinkSync(path.join(ROOT, "package.json"), path.join(outDir, "package.json"))
  const run = () => {
    try {
      compile(outDir)
    } catch (error) {
      throw new Error(
        `test/support/compileOnce.ts: could not compile the sources for the child processes (the same errors fail under tsx): ${
          String(error)
        }`,
        { cause: error }
      )
    }
  }
  run()
  project.onTestsRerun(run)
  process.env.SWITCHYARD_TEST_JS = outDir
  return () => {
    delete process.env.SWITCHYARD_TEST_JS
    fs.rmSync(outDir, { recursive: true, force: true })
  }
}
