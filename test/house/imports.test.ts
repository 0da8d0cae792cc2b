import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { findImportCycles, formatCycles, importSpecifiers } from "../../scripts/import-cycles.js"

const srcRoot = path.resolve(import.meta.dirname, "../../src")

const tempRoots: Array<string> = []
afterAll(() => {
  for (const dir of tempRoots) fs.rmSync(dir, { recursive: true, force: true })
})

/** Writes a tiny tree of .ts files into a fresh temp folder and returns its path. */
const fixture = (files: Record<string, string>): string => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-imports-"))
  tempRoots.push(root)
  for (const [name, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(root, name)), { recursive: true })
    fs.writeFileSync(path.join(root, name), text)
  }
  return root
}

describe("the import-circle detector (scripts/import-cycles.ts)", () => {
  it("reads every import form: named, default, namespace, type-only, re-exports, side effects, import(), multi-line", () => {
    const source = [
      `import { a } from "./a.js"`,
      `import type { B } from './b.js'`,
      `import C, { c } from "./c.js"`,
      `import * as D from "./d.js"`,
      `export * from "./e.js"`,
      `export * as F from "./f.js"`,
      `export type { G } from "./g.js"`,
      `import {`,
      `  h1,`,
      `  type h2`,
      `} from "./h.js"`,
      `import "./i.js"`,
      `type J = typeof import("./j.js")`,
      `export { local }`,
      `// import { no } from "./commented.js"`,
      `/* export * from "./block-commented.js" */`,
      "const s = `import { x } from \"./template.js\"`",
      `const t = "import './string.js'"`
    ].join("\n")
    expect(importSpecifiers(source)).toEqual([
      "./a.js",
      "./b.js",
      "./c.js",
      "./d.js",
      "./e.js",
      "./f.js",
      "./g.js",
      "./h.js",
      "./i.js",
      "./j.js"
    ])
  })

  it("finds no circle in a tree whose arrows run one way", () => {
    const root = fixture({
      "types.ts": `export interface T { readonly n: number }\n`,
      "ops.ts": `import type { T } from "./types.js"\nexport const inc = (t: T): T => ({ n: t.n + 1 })\n`,
      "sub/index.ts": `export * from "../ops.js"\n`,
      "Public.ts": `import { inc } from "./sub/index.js"\nexport type { T } from "./types.js"\nexport const run = inc\n`
    })
    expect(findImportCycles(root)).toEqual([])
  })

  it("catches a circle made only of type imports, through a folder's index.ts", () => {
    const root = fixture({
      "engine.ts":
        `import type { Task } from "./lane/index.js"\nexport interface Engine { readonly tasks: Array<Task> }\n`,
      "lane/index.ts": `export type { Task } from "./task.js"\n`,
      "lane/task.ts": `import type { Engine } from "../engine.js"\nexport interface Task { readonly engine: Engine }\n`,
      "free.ts": `import type { Engine } from "./engine.js"\nexport type E = Engine\n`
    })
    const cycles = findImportCycles(root)
    expect(cycles).toEqual([
      {
        files: ["engine.ts", "lane/index.ts", "lane/task.ts"],
        path: ["engine.ts", "lane/index.ts", "lane/task.ts", "engine.ts"]
      }
    ])
    expect(formatCycles(cycles)).toContain("engine.ts -> lane/index.ts -> lane/task.ts -> engine.ts")
  })

  it("catches two separate circles, a re-export circle and a file that imports itself", () => {
    const root = fixture({
      "a.ts": `export * from "./b.js"\nexport const a = 1\n`,
      "b.ts": `import { a } from "./a.js"\nexport const b = a\n`,
      "self.ts": `import * as me from "./self.js"\nexport const x = 1\nexport const y = me.x\n`,
      "ok.ts": `import { b } from "./b.js"\nexport const ok = b\n`
    })
    expect(findImportCycles(root).map((c) => c.files)).toEqual([["a.ts", "b.ts"], ["self.ts"]])
  })

  it("does not follow package imports or files outside the folder", () => {
    const root = fixture({
      "inner/a.ts": `import { Effect } from "effect"\nimport { x } from "../outer.js"\nexport const a = [Effect, x]\n`,
      "outer.ts": `import { a } from "./inner/a.js"\nexport const x = a\n`
    })
    expect(findImportCycles(path.join(root, "inner"))).toEqual([])
    expect(findImportCycles(root).map((c) => c.files)).toEqual([["inner/a.ts", "outer.ts"]])
  })
})

describe("src/ imports run one way", () => {
  it("has no import circle anywhere in src/, type imports included", () => {
    const cycles = findImportCycles(srcRoot)
    expect(cycles, `import circles in src/:\n${formatCycles(cycles)}`).toEqual([])
  })
})
