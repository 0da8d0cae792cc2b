/**
 * `DeliveryLog`, `DeliveryQueue` and `CommandQueue` are each a module, a type and a namespace of the
 * module's types under one name (src/delivery/index.ts, src/queue/index.ts). The namespaces list those
 * types by hand; this reads the modules and the entry points with the TypeScript compiler and fails when a
 * type of a module is missing from its namespace (or a namespace names what the module does not have).
 * test/package/spellings.test.ts checks the spellings themselves at type level.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const root = path.resolve(import.meta.dirname, "../..")

const MERGED = [
  { entry: "src/delivery/index.ts", name: "DeliveryLog", module: "src/delivery/DeliveryLog.ts" },
  { entry: "src/delivery/index.ts", name: "DeliveryQueue", module: "src/delivery/DeliveryQueue.ts" },
  { entry: "src/queue/index.ts", name: "CommandQueue", module: "src/queue/CommandQueue.ts" }
] as const

/** src/queue and src/delivery only: `noResolve` keeps effect's declarations (seconds of parsing) out. */
const program = () => {
  const files = ["src/queue", "src/delivery"].flatMap((dir) =>
    (fs.readdirSync(path.join(root, dir), { recursive: true }) as Array<string>)
      .filter((f) => f.endsWith(".ts"))
      .map((f) => path.join(root, dir, f))
  )
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    noEmit: true,
    noResolve: true,
    noLib: true,
    types: []
  }
  return ts.createProgram(files, options)
}

/** The names of a symbol table's members with a type meaning (interfaces, type aliases, re-exported types). */
const typeNames = (checker: ts.TypeChecker, symbols: ReadonlyArray<ts.Symbol>): Array<string> =>
  symbols
    .filter((s) => {
      const target = s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s
      return (target.flags & ts.SymbolFlags.Type) !== 0
    })
    .map((s) => s.name)
    .sort()

describe("the merged namespaces of the entry points", () => {
  it("list every type of their module, and only those", () => {
    const p = program()
    const checker = p.getTypeChecker()
    const found = MERGED.map(({ entry, module, name }) => {
      const moduleSymbol = checker.getSymbolAtLocation(p.getSourceFile(path.join(root, module))!)!
      const entrySymbol = checker.getSymbolAtLocation(p.getSourceFile(path.join(root, entry))!)!
      const merged = checker.getExportsOfModule(entrySymbol).find((s) => s.name === name)
      // The namespace's members: the declared namespace merged into the exported name.
      const members = merged?.exports === undefined ? [] : [...merged.exports.values() as Iterable<ts.Symbol>]
      return {
        name,
        moduleTypes: typeNames(checker, checker.getExportsOfModule(moduleSymbol)),
        namespaceTypes: typeNames(checker, members),
        // The name is a value, a type and a namespace at once.
        meanings: merged === undefined
          ? []
          : [ts.SymbolFlags.Value, ts.SymbolFlags.Type, ts.SymbolFlags.Namespace].map((f) => (merged.flags & f) !== 0)
      }
    })
    for (const f of found) {
      expect({ name: f.name, types: f.namespaceTypes, meanings: f.meanings }).toEqual({
        name: f.name,
        types: f.moduleTypes,
        meanings: [true, true, true]
      })
    }
    // The check reads something: each module has its own interface among its types.
    expect(found.map((f) => f.moduleTypes.includes(f.name))).toEqual([true, true, true])
  })
})
