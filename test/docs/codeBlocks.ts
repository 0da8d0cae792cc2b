/**
 * The TypeScript blocks of the documentation, and one `tsc` run that type-checks them all.
 *
 * Every ```ts (or ```typescript) block of README.md and docs/*.md is written to a temporary folder as
 * a module of its own; a tsconfig there maps "switchyard" and its subpath entries to the `src` entry
 * points (so no build is needed) and uses the repository's strict options; the native `tsc` checks
 * them in one run, and each error is reported against the Markdown file and line it came from.
 * A block is placed where a test file would be (a folder beside test/support), so a block about
 * testing may import `../support/fakeAnthropic.js`.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** The repository root. */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..")

/** The package's entry points as a user imports them, and the source each one is built from. */
export const ENTRY_POINTS: Readonly<Record<string, string>> = {
  switchyard: "src/index.ts",
  "switchyard/queue": "src/queue/index.ts",
  "switchyard/delivery": "src/delivery/index.ts",
  "switchyard/agent": "src/agent/index.ts",
  "switchyard/cluster": "src/cluster/index.ts"
}

/** One fenced TypeScript block. */
export interface CodeBlock {
  /** The Markdown file, relative to the repository root (`docs/agent.md`). */
  readonly file: string
  /** The 1-based line of the opening fence in that file. */
  readonly fenceLine: number
  /** The block's text, its fence's indentation removed. */
  readonly source: string
}

/** A `tsc` error placed back in the Markdown it came from. */
export interface BlockError {
  /** `docs/agent.md:12` for an error in a block, or the path `tsc` named for any other file. */
  readonly where: string
  /** The block the error is in, when it is in one. */
  readonly block: CodeBlock | undefined
  /** The line inside the block (1 = the first line after the fence), when it is in one. */
  readonly blockLine: number | undefined
  readonly code: string
  readonly message: string
}

const FENCE = /^( {0,3})(`{3,}|~{3,})\s*([^`\s]*)/
const TS_LANGS = new Set(["ts", "typescript"])

/**
 * The ```ts and ```typescript blocks of one Markdown text (CommonMark fences: ``` or ~~~, three or
 * more, closed by the same character at least as long; other blocks are skipped whole, so a fence
 * shown inside a ```md block is not taken for one).
 */
export const extractBlocks = (file: string, markdown: string): Array<CodeBlock> => {
  const lines = markdown.split(/\r?\n/)
  const blocks: Array<CodeBlock> = []
  let i = 0
  while (i < lines.length) {
    const open = FENCE.exec(lines[i]!)
    if (open === null) {
      i++
      continue
    }
    const [, indent, fence, info] = open as unknown as [string, string, string, string]
    const fenceLine = i + 1
    const body: Array<string> = []
    i++
    while (i < lines.length) {
      const line = lines[i]!
      const trimmed = line.trim()
      if (trimmed.length >= fence.length && trimmed === fence[0]!.repeat(trimmed.length)) break
      body.push(line.startsWith(indent) ? line.slice(indent.length) : line.trimStart())
      i++
    }
    i++ // the closing fence (or the end of the file)
    if (TS_LANGS.has(info.toLowerCase())) blocks.push({ file, fenceLine, source: body.join("\n") + "\n" })
  }
  return blocks
}

/** README.md and every docs/*.md of the repository, in a stable order. */
export const documentationFiles = (root: string = ROOT): Array<string> => {
  const docs = fs.existsSync(path.join(root, "docs"))
    ? fs.readdirSync(path.join(root, "docs")).filter((name) => name.endsWith(".md")).sort().map((name) =>
      `docs/${name}`
    )
    : []
  return ["README.md", ...docs]
}

/** Every TypeScript block of README.md and docs/*.md. */
export const documentationBlocks = (root: string = ROOT): Array<CodeBlock> =>
  documentationFiles(root).flatMap((file) => extractBlocks(file, fs.readFileSync(path.join(root, file), "utf8")))

/** The text of README.md's section `## title`, up to the next `## ` heading; undefined when there is none. */
export const readmeSection = (title: string, root: string = ROOT): string | undefined => {
  const readme = fs.readFileSync(path.join(root, "README.md"), "utf8")
  const start = readme.indexOf(`\n## ${title}\n`)
  return start === -1 ? undefined : readme.slice(start + 1).split(/\n## /)[0]
}

/** The module name a block is written under: `docs-agent.md-L7.ts`. */
const moduleName = (block: CodeBlock): string => `${block.file.replace(/[\\/]/g, "-")}-L${block.fenceLine}.ts`

/** The strict options of the repository's tsconfig.json, with the entry points mapped to `src`. */
const tsconfigFor = (root: string, files: ReadonlyArray<string>) => ({
  compilerOptions: {
    target: "ES2022",
    lib: ["ES2022", "DOM"],
    module: "NodeNext",
    moduleResolution: "NodeNext",
    // A block without import or export is still a module of its own, not a global script.
    moduleDetection: "force",
    strict: true,
    exactOptionalPropertyTypes: true,
    noFallthroughCasesInSwitch: true,
    noImplicitOverride: true,
    isolatedModules: true,
    verbatimModuleSyntax: true,
    esModuleInterop: true,
    // The libraries' declarations are checked by `npm run typecheck`; here only the blocks matter.
    skipLibCheck: true,
    types: ["node"],
    noEmit: true,
    paths: Object.fromEntries(Object.entries(ENTRY_POINTS).map(([name, src]) => [name, [path.join(root, src)]]))
  },
  files
})

const ERROR_LINE = /^(.+?)\((\d+),(\d+)\): error (TS\d+): (.*)$/

/** The result of one `tsc` run over a set of blocks. */
export interface CheckResult {
  readonly errors: Array<BlockError>
  /** Output lines that are not an error of a file (a broken tsconfig, a crash). */
  readonly unparsed: Array<string>
  /** tsc's exit status and its whole output. */
  readonly status: number | null
  readonly output: string
}

/**
 * Type-checks the blocks in one run of the native `tsc` (TypeScript 7, installed as `typescript-native`;
 * `typescript` is 5.9, for the lint tools, and which of the two `node_modules/.bin/tsc` links to is not
 * fixed) and returns each error placed in its Markdown file and line.
 */
export const checkBlocks = (blocks: ReadonlyArray<CodeBlock>, root: string = ROOT): CheckResult => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-doc-blocks-"))
  try {
    // "effect", "@types/node" and the rest resolve from the repository's own node_modules; a block
    // sits where a test file would (test/<part>/), so `../support/fakeAnthropic.js` is test/support's.
    fs.symlinkSync(path.join(root, "node_modules"), path.join(dir, "node_modules"), "dir")
    fs.symlinkSync(path.join(root, "test", "support"), path.join(dir, "support"), "dir")
    fs.mkdirSync(path.join(dir, "blocks"))
    // ES modules, as in a project of a user's (and so top-level await is allowed).
    fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ private: true, type: "module" }))
    const byModule = new Map<string, CodeBlock>()
    for (const block of blocks) {
      const name = moduleName(block)
      if (byModule.has(name)) throw new Error(`Expected one TypeScript block per fence line, got two named \`${name}\``)
      byModule.set(name, block)
      fs.writeFileSync(path.join(dir, "blocks", name), block.source)
    }
    fs.writeFileSync(
      path.join(dir, "tsconfig.json"),
      JSON.stringify(tsconfigFor(root, [...byModule.keys()].map((name) => `blocks/${name}`)), null, 2)
    )
    const run = spawnSync(process.execPath, [
      path.join(root, "node_modules", "typescript-native", "bin", "tsc"),
      "-p",
      path.join(dir, "tsconfig.json"),
      "--pretty",
      "false"
    ], {
      cwd: dir,
      encoding: "utf8"
    })
    if (run.error !== undefined) throw run.error
    const output = `${run.stdout}${run.stderr}`
    const errors: Array<BlockError> = []
    const unparsed: Array<string> = []
    for (const line of output.split("\n")) {
      const match = ERROR_LINE.exec(line)
      if (match === null) {
        // tsc continues a long message on indented lines; anything else (a config error) is kept.
        const last = errors.at(-1)
        if (last !== undefined && /^\s+\S/.test(line)) {
          errors[errors.length - 1] = { ...last, message: `${last.message}\n${line.trim()}` }
        } else if (line.trim() !== "") unparsed.push(line)
        continue
      }
      const [, file, lineText, , code, message] = match as unknown as [string, string, string, string, string, string]
      const block = byModule.get(path.basename(file))
      const blockLine = Number(lineText)
      errors.push(
        block !== undefined && path.resolve(dir, file) === path.join(dir, "blocks", path.basename(file))
          ? { where: `${block.file}:${block.fenceLine + blockLine}`, block, blockLine, code, message }
          : {
            where: `${path.relative(root, path.resolve(dir, file))}:${lineText}`,
            block: undefined,
            blockLine: undefined,
            code,
            message
          }
      )
    }
    // In the order of the blocks given, then by line: a file's errors read top to bottom.
    const order = new Map(blocks.map((block, index) => [block, index]))
    const rank = (error: BlockError) => (error.block === undefined ? -1 : order.get(error.block)!)
    errors.sort((a, b) => rank(a) - rank(b) || (a.blockLine ?? 0) - (b.blockLine ?? 0))
    return { errors, unparsed, status: run.status, output }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

/** One line per error: `docs/agent.md:12 (the ts block at line 7, its line 5): TS2304 Cannot find name 'x'.` */
export const describeError = (error: BlockError): string =>
  error.block === undefined
    ? `${error.where}: ${error.code} ${error.message}`
    : `${error.where} (the ts block at line ${error.block.fenceLine}, its line ${error.blockLine}): ${error.code} ${error.message}`
