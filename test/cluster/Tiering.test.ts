/**
 * A runner's hot functions are optimised sooner (src/cluster/Tiering.ts): runner-main.ts applies the runner's V8
 * tiering before the rest of its code is evaluated, and with it a small function called 2,000 times is
 * optimised by TurboFan, which V8's default budget does only after ~4,000 to 5,000 calls (the probe,
 * test/cluster/tieringProbe.ts, in a child with V8's intrinsics and synchronous optimisation).
 */
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { nodeArgs } from "../support/node.js"

const root = path.resolve(import.meta.dirname, "../..")
/** Between the calls that optimise the probe's function with the runner's budget (~1,100) and V8's default (~4,500). */
const CALLS = 2_000

const optimised = (apply: boolean): boolean => {
  const out = execFileSync(process.execPath, [
    "--allow-natives-syntax",
    "--no-concurrent-recompilation",
    ...nodeArgs("test/cluster/tieringProbe.ts"),
    apply ? "1" : "0",
    String(CALLS)
  ], { cwd: root, encoding: "utf8" })
  return (JSON.parse(out.trim()) as { turbofan: boolean }).turbofan
}

describe("a runner's V8 tiering", () => {
  it("optimises a function called 2,000 times, which V8's default budget does not", () => {
    expect(optimised(false)).toBe(false)
    expect(optimised(true)).toBe(true)
  })

  it("is applied by runner-main.ts before any other of its imports", () => {
    const source = fs.readFileSync(path.join(root, "src/cluster/runner-main.ts"), "utf8")
    const imports = source.split("\n").filter((l) => l.startsWith("import "))
    expect(imports[0]).toBe(`import "./TieringApplied.js"`)
  })
})
