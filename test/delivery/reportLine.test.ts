/**
 * The crash tests' report channel (test/delivery/fixtures/reportLine.ts): a line a child reported
 * reaches the parent even when the parent reads late and the child dies the moment after. Through
 * stdout this fails on a loaded machine (the lines past what the kernel holds wait in the child's
 * memory and die with it), which made the crash model see an append without the ack that followed.
 */
import { assert, describe, it } from "@effect/vitest"
import { join } from "node:path"
import { spawnReporting, stall } from "./fixtures/reportLine.js"

const burst = join(import.meta.dirname, "fixtures", "reportBurst.ts")

describe("crash tests' report channel", () => {
  it("every line reported before a SIGKILL arrives, in order, though the parent reads late", async () => {
    const n = 3000 // far more than a socket of the child's stdio holds (a few hundred small writes)
    const got: Array<string> = []
    const { child, stderr } = spawnReporting([burst, String(n)], (line) => {
      if (line === "ready") return stall(300)
      got.push(line)
    })
    const signal = await new Promise<NodeJS.Signals | null>((resolve, reject) => {
      child.on("error", reject)
      child.on("close", (_code, signal) => resolve(signal))
    })
    assert.strictEqual(signal, "SIGKILL", `the child killed itself after its last line: ${stderr()}`)
    assert.strictEqual(got.length, n, "every line reported arrived")
    got.forEach((line, i) => assert.strictEqual(line, `L ${i}`))
  }, 30_000)
})
