/**
 * The package as a user's project gets it: built with tsconfig.build.json (what `prepare` runs)
 * into a temporary `node_modules/switchyard` with our package.json, then imported by name, through
 * `exports`, by plain `node` (no tsx) on the Node that runs the tests, and type-checked through the
 * same `exports` (`types`) by the native tsc. Proves what README's "Use it in your own project"
 * and "Node.js versions" say: every entry point loads here, and none of them loads `undici`
 * (which does not load on Node 20).
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ENTRY_POINTS, ROOT } from "./codeBlocks.js"

/** A few names each entry point must export (what the README's table says it holds). */
const EXPECTED: Readonly<Record<string, ReadonlyArray<string>>> = {
  switchyard: ["CommandQueue", "createLanes", "createCommandQueue", "DeliveryLog", "DeliveryQueue", "Agent", "Model"],
  "switchyard/queue": ["CommandQueue", "createLanes", "createCommandQueue", "QueueFailure"],
  "switchyard/delivery": ["DeliveryLog", "DeliveryQueue", "DeliveryFailure"],
  "switchyard/agent": ["Agent", "Model", "ScriptedModel", "AnthropicModel", "Transcripts", "serve", "runMain"],
  "switchyard/cluster": ["ClusterQueue", "PgDeliveryLog", "ClusterDelivery", "ClusterAgent", "Runner"]
}

/** What the project itself has in node_modules that the built package imports at run time. */
const LINKED = ["effect", "@effect", "@anthropic-ai", "@types"]

let project: string

const run = (command: string, args: ReadonlyArray<string>) => {
  const result = spawnSync(command, args, { cwd: project, encoding: "utf8" })
  if (result.error !== undefined) throw result.error
  return result
}

beforeAll(() => {
  project = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-package-"))
  const pkg = path.join(project, "node_modules", "switchyard")
  fs.mkdirSync(pkg, { recursive: true })
  for (const name of LINKED) {
    fs.symlinkSync(path.join(ROOT, "node_modules", name), path.join(project, "node_modules", name), "dir")
  }
  fs.copyFileSync(path.join(ROOT, "package.json"), path.join(pkg, "package.json"))
  fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({ private: true, type: "module" }))
  const build = run(process.execPath, [
    path.join(ROOT, "node_modules", "typescript-native", "bin", "tsc"),
    "-p",
    path.join(ROOT, "tsconfig.build.json"),
    "--outDir",
    path.join(pkg, "dist"),
    "--declarationMap",
    "false",
    "--sourceMap",
    "false"
  ])
  expect(build.status, `${build.stdout}${build.stderr}`).toBe(0)
}, 120_000)

afterAll(() => {
  if (project !== undefined) fs.rmSync(project, { recursive: true, force: true })
})

describe("the built package", () => {
  it("every entry point loads by name with plain node on this Node, and none loads undici", { timeout: 60_000 }, () => {
    fs.writeFileSync(
      path.join(project, "probe.mjs"),
      [
        `import { createRequire } from "node:module"`,
        `const exports = {}`,
        `for (const entry of ${
          JSON.stringify(Object.keys(ENTRY_POINTS))
        }) exports[entry] = Object.keys(await import(entry))`,
        `const loaded = Object.keys(createRequire(import.meta.url).cache)`,
        `console.log(JSON.stringify({ node: process.version, exports, undici: loaded.filter((file) => /[\\\\/]undici[\\\\/]/.test(file)) }))`
      ].join("\n")
    )
    const probe = run(process.execPath, ["probe.mjs"])
    expect(probe.status, probe.stderr).toBe(0)
    const report = JSON.parse(probe.stdout)
    expect(report.node).toBe(process.version)
    for (const [entry, names] of Object.entries(EXPECTED)) {
      expect(report.exports[entry], entry).toEqual(expect.arrayContaining([...names]))
    }
    expect(report.undici).toEqual([])
  })

  it(
    "a user's TypeScript file type-checks against it through exports (types), in one tsc run",
    { timeout: 60_000 },
    () => {
      fs.writeFileSync(
        path.join(project, "main.ts"),
        [
          `import { Effect } from "effect"`,
          `import { CommandQueue, createCommandQueue } from "switchyard/queue"`,
          `import { DeliveryLog } from "switchyard/delivery"`,
          `import { ScriptedModel } from "switchyard/agent"`,
          `import { ClusterQueue } from "switchyard/cluster"`,
          `import * as Root from "switchyard"`,
          `const made: Effect.Effect<CommandQueue.CommandQueue, unknown, unknown> = CommandQueue.make()`,
          `export const all = [made, createCommandQueue, DeliveryLog.open, ScriptedModel.layer, ClusterQueue.make, Root.Agent.make]`,
          `// @ts-expect-error a wrong type must be an error (the declarations are real, not any)`,
          `export const wrong: number = Root.CommandQueue.make`,
          ``
        ].join("\n")
      )
      fs.writeFileSync(
        path.join(project, "tsconfig.json"),
        JSON.stringify({
          compilerOptions: {
            target: "ES2022",
            module: "NodeNext",
            moduleResolution: "NodeNext",
            strict: true,
            exactOptionalPropertyTypes: true,
            skipLibCheck: true,
            types: ["node"],
            noEmit: true
          },
          files: ["main.ts"]
        })
      )
      const check = run(process.execPath, [
        path.join(ROOT, "node_modules", "typescript-native", "bin", "tsc"),
        "-p",
        "tsconfig.json",
        "--pretty",
        "false"
      ])
      expect(`${check.stdout}${check.stderr}`).toBe("")
      expect(check.status).toBe(0)
    }
  )
})
