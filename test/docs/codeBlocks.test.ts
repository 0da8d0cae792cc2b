/**
 * Every ```ts block of README.md and docs/*.md compiles as pasted: one `tsc` run over all of them
 * (see codeBlocks.ts), with two canary blocks in the same run that prove the check bites: one that
 * must fail with a type error (so a misconfigured run that types everything `any`, or resolves
 * nothing, cannot pass), and one that imports from every entry point (so each mapping resolves).
 */
import { describe, expect, it } from "vitest"
import {
  checkBlocks,
  describeError,
  documentationBlocks,
  documentationFiles,
  extractBlocks,
  readmeSection
} from "./codeBlocks.js"
import type { CodeBlock } from "./codeBlocks.js"

const WRONG: CodeBlock = {
  file: "canary/wrong.md",
  fenceLine: 1,
  source: `import { CommandQueue } from "switchyard"\nexport const notANumber: number = CommandQueue.make\n`
}

const EVERY_ENTRY: CodeBlock = {
  file: "canary/entries.md",
  fenceLine: 1,
  source: [
    `import { Effect } from "effect"`,
    `import { CommandQueue } from "switchyard"`,
    `import { createCommandQueue } from "switchyard/queue"`,
    `import { DeliveryLog, DeliveryQueue } from "switchyard/delivery"`,
    `import { Agent } from "switchyard/agent"`,
    `import { ClusterQueue } from "switchyard/cluster"`,
    `export const all = [Effect.void, CommandQueue.make, createCommandQueue, DeliveryLog.open, DeliveryQueue.make, Agent.make, ClusterQueue.make]`,
    ``
  ].join("\n")
}

describe("extractBlocks", () => {
  it("takes ts and typescript fences, with their line, and skips every other block whole", () => {
    const markdown = [
      "# Title", //                       1
      "```ts", //                         2
      "const a = 1", //                   3
      "```", //                           4
      "````md", //                        5
      "```ts", //                         6  (inside a md block: not a block of its own)
      "const hidden = 2", //              7
      "```", //                           8
      "````", //                          9
      "- a list item", //                 10
      "  ~~~TypeScript", //               11
      "  const b = 2", //                 12
      "  ~~~", //                         13
      "```text", //                       14
      "const c: = broken", //             15
      "```" //                            16
    ].join("\n")
    expect(extractBlocks("x.md", markdown)).toEqual([
      { file: "x.md", fenceLine: 2, source: "const a = 1\n" },
      { file: "x.md", fenceLine: 11, source: "const b = 2\n" }
    ])
  })
})

describe("the documentation's TypeScript blocks", () => {
  it("compile as pasted: every ts block of README.md and docs/*.md, in one tsc run", { timeout: 120_000 }, () => {
    const blocks = documentationBlocks()
    // The README's tour is a block; an extractor that finds nothing must not pass.
    expect(blocks.some((block) => block.file === "README.md")).toBe(true)

    const result = checkBlocks([...blocks, WRONG, EVERY_ENTRY])

    const canary = result.errors.filter((error) => error.block === WRONG)
    expect(canary.map((error) => [error.where, error.code]), result.output).toEqual([["canary/wrong.md:3", "TS2322"]])
    const rest = result.errors.filter((error) => error.block !== WRONG)
    // One line per error, naming the Markdown file and line; the list is the failure message.
    expect(rest.map(describeError)).toEqual([])
    // tsc said nothing else (no config error, no crash), and failed only because of the canary.
    expect(result.unparsed).toEqual([])
    expect(result.status, result.output).not.toBe(0)
  })
})

describe("README's documentation list", () => {
  it("links every docs/*.md, so a newcomer finds each guide", () => {
    const list = readmeSection("Documentation")
    expect(list, "README.md has a section \"## Documentation\"").toBeDefined()
    const docs = documentationFiles().filter((file) => file.startsWith("docs/"))
    expect(docs.length).toBeGreaterThan(0)
    expect(docs.filter((file) => !list!.includes(`](${file})`))).toEqual([])
  })
})
