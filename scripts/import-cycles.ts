/**
 * Finds import circles among the TypeScript files under a folder (`src/` by default), type-only
 * imports included: `import`, `import type`, `export ... from`, `export * from`, side-effect
 * `import "./x.js"` and `import("./x.js")` (value or `typeof import(...)`). Relative specifiers are
 * resolved the way NodeNext does for our sources: `./x.js` -> `x.ts`, `./dir/index.js` ->
 * `dir/index.ts`; package specifiers are not followed. Strongly connected components (Tarjan)
 * with more than one file, or a file that imports itself, are circles; each is printed with one
 * concrete path through it.
 *
 * Run: `node --import tsx scripts/import-cycles.ts [folder]` (exit code 1 when there is a circle).
 * The test `test/house/imports.test.ts` runs it on `src/` in `npm test`.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

/** One circle: the files of a strongly connected component and one cycle through all or some of them. */
export interface ImportCycle {
  /** Every file of the component, relative to the root, sorted. */
  readonly files: ReadonlyArray<string>
  /** A closed path `a -> b -> ... -> a` through the component (first and last entries equal). */
  readonly path: ReadonlyArray<string>
}

/** Blanks out comments and the inside of string and template literals, keeping offsets and newlines. */
const blankCommentsAndStrings = (text: string): string => {
  const out = text.split("")
  const blank = (from: number, to: number) => {
    for (let k = from; k < to; k++) if (out[k] !== "\n") out[k] = " "
  }
  let i = 0
  // Template literals nest through `${ ... }`; each entry counts open braces inside one `${`.
  const templates: Array<number> = []
  const n = text.length
  const scanTemplate = () => {
    // i is just after a backtick or a closing `}` of `${`; blank up to the next `${` or backtick.
    const start = i
    while (i < n) {
      const c = text[i]
      if (c === "\\") {
        i += 2
        continue
      }
      if (c === "`") {
        blank(start, i)
        i++
        return
      }
      if (c === "$" && text[i + 1] === "{") {
        blank(start, i)
        i += 2
        templates.push(0)
        return
      }
      i++
    }
    blank(start, i)
  }
  while (i < n) {
    const c = text[i]
    const d = text[i + 1]
    if (c === "/" && d === "/") {
      const end = text.indexOf("\n", i)
      const stop = end === -1 ? n : end
      blank(i, stop)
      i = stop
    } else if (c === "/" && d === "*") {
      const end = text.indexOf("*/", i + 2)
      const stop = end === -1 ? n : end + 2
      blank(i, stop)
      i = stop
    } else if (c === "\"" || c === "'") {
      // Keep the quotes (the import parser reads the specifier between them), blank nothing inside
      // a specifier-like string: only strings are skipped so that their contents cannot open a comment.
      let j = i + 1
      while (j < n && text[j] !== c && text[j] !== "\n") j += text[j] === "\\" ? 2 : 1
      i = j + 1
    } else if (c === "`") {
      i++
      scanTemplate()
    } else if (templates.length > 0 && c === "{") {
      templates[templates.length - 1]++
      i++
    } else if (templates.length > 0 && c === "}") {
      if (templates[templates.length - 1] === 0) {
        templates.pop()
        i++
        scanTemplate()
      } else {
        templates[templates.length - 1]--
        i++
      }
    } else {
      i++
    }
  }
  return out.join("")
}

const STATIC_IMPORT =
  /(?:^|[\n;])[ \t]*(?:import|export)\s+(?:type\s+)?(?:[\w$]+\s*,\s*)?(?:\{[^}]*\}|\*\s*(?:as\s+[\w$]+)?|[\w$]+)\s*from\s*(["'])([^"'\n]+)\1/g
const SIDE_EFFECT_IMPORT = /(?:^|[\n;])[ \t]*import\s*(["'])([^"'\n]+)\1/g
const DYNAMIC_IMPORT = /\bimport\s*\(\s*(["'])([^"'\n]+)\1\s*\)/g

/** The module specifiers a TypeScript source imports or re-exports, in order of appearance. */
export const importSpecifiers = (source: string): ReadonlyArray<string> => {
  const code = blankCommentsAndStrings(source)
  const found: Array<{ readonly at: number; readonly spec: string }> = []
  for (const re of [STATIC_IMPORT, SIDE_EFFECT_IMPORT, DYNAMIC_IMPORT]) {
    for (const m of code.matchAll(re)) found.push({ at: m.index, spec: m[2] })
  }
  return found.sort((a, b) => a.at - b.at).map((f) => f.spec)
}

/** The .ts file a relative specifier names, or undefined for a package or a file that is not there. */
export const resolveSpecifier = (fromFile: string, spec: string): string | undefined => {
  if (!spec.startsWith("./") && !spec.startsWith("../")) return undefined
  const base = path.resolve(path.dirname(fromFile), spec)
  const stem = base.replace(/\.(?:js|ts|mjs|mts)$/, "")
  const candidates = [`${stem}.ts`, `${stem}.mts`, path.join(base, "index.ts"), path.join(stem, "index.ts")]
  return candidates.find((c) => fs.existsSync(c) && fs.statSync(c).isFile())
}

const listSources = (dir: string): Array<string> =>
  fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => {
      const full = path.join(dir, e.name)
      if (e.isDirectory()) return e.name === "node_modules" ? [] : listSources(full)
      return /\.m?ts$/.test(e.name) && !e.name.endsWith(".d.ts") ? [full] : []
    })
    .sort()

/** The import graph of every .ts file under root: file -> the files under root it imports. */
export const importGraph = (root: string): ReadonlyMap<string, ReadonlyArray<string>> => {
  const absRoot = path.resolve(root)
  const graph = new Map<string, Array<string>>()
  for (const file of listSources(absRoot)) {
    const targets = new Set<string>()
    for (const spec of importSpecifiers(fs.readFileSync(file, "utf8"))) {
      const target = resolveSpecifier(file, spec)
      if (target !== undefined && target.startsWith(absRoot + path.sep)) targets.add(target)
    }
    graph.set(file, [...targets])
  }
  return graph
}

/** Tarjan's strongly connected components, in reverse topological order. */
const components = (graph: ReadonlyMap<string, ReadonlyArray<string>>): Array<Array<string>> => {
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const onStack = new Set<string>()
  const stack: Array<string> = []
  const result: Array<Array<string>> = []
  let next = 0
  const visit = (v: string) => {
    index.set(v, next)
    low.set(v, next)
    next++
    stack.push(v)
    onStack.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!))
      }
    }
    if (low.get(v) === index.get(v)) {
      const scc: Array<string> = []
      let w: string
      do {
        w = stack.pop()!
        onStack.delete(w)
        scc.push(w)
      } while (w !== v)
      result.push(scc)
    }
  }
  for (const v of graph.keys()) if (!index.has(v)) visit(v)
  return result
}

/** The shortest closed path from start back to start inside the component (breadth first). */
const shortestCycle = (
  graph: ReadonlyMap<string, ReadonlyArray<string>>,
  members: ReadonlySet<string>,
  start: string
): Array<string> => {
  const parent = new Map<string, string>()
  const queue = [start]
  for (let head = 0; head < queue.length; head++) {
    const v = queue[head]
    for (const w of graph.get(v) ?? []) {
      if (!members.has(w)) continue
      if (w === start) {
        const back = [v]
        while (back[back.length - 1] !== start) back.push(parent.get(back[back.length - 1])!)
        return [...back.reverse(), start]
      }
      if (!parent.has(w)) {
        parent.set(w, v)
        queue.push(w)
      }
    }
  }
  return [start]
}

/** Every import circle among the .ts files under root, paths relative to root. */
export const findImportCycles = (root: string): ReadonlyArray<ImportCycle> => {
  const absRoot = path.resolve(root)
  const graph = importGraph(absRoot)
  const rel = (f: string) => path.relative(absRoot, f).split(path.sep).join("/")
  return components(graph)
    .filter((scc) => scc.length > 1 || (graph.get(scc[0]) ?? []).includes(scc[0]))
    .map((scc) => {
      const files = scc.map(rel).sort()
      const start = scc.slice().sort()[0]
      return { files, path: shortestCycle(graph, new Set(scc), start).map(rel) }
    })
    .sort((a, b) => a.files[0].localeCompare(b.files[0]))
}

/** A human-readable account of the circles, one paragraph each. */
export const formatCycles = (cycles: ReadonlyArray<ImportCycle>): string =>
  cycles
    .map(
      (c, i) =>
        `circle ${i + 1}: ${c.files.length} file(s): ${c.files.join(", ")}\n  for example: ${c.path.join(" -> ")}`
    )
    .join("\n")

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = process.argv[2] ?? "src"
  const cycles = findImportCycles(root)
  if (cycles.length === 0) {
    console.log(`no import circles under ${root}/ (${importGraph(root).size} files)`)
  } else {
    console.log(`${cycles.length} import circle(s) under ${root}/:\n${formatCycles(cycles)}`)
    process.exitCode = 1
  }
}
