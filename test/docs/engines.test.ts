/**
 * The README's "Node.js versions" section is true: package.json's `engines` is a plain floor that
 * the Node running the tests meets, and the installed packages whose own `engines` exclude that
 * floor (npm's EBADENGINE warnings) are exactly the ones the README's table names, with the range
 * each declares. (That the runtime entry points load on this Node is test/package/consumer.test.ts.)
 */
import * as fs from "node:fs"
import * as path from "node:path"
import semver from "semver"
import { describe, expect, it } from "vitest"
import { readmeSection, ROOT } from "./codeBlocks.js"

const readJson = (file: string): any => JSON.parse(fs.readFileSync(file, "utf8"))

/** Our own `engines.node`, which must be a floor (`>=20.19`). */
const ourRange = (): string => readJson(path.join(ROOT, "package.json")).engines.node

/** `{ package, declares }` for every installed package whose `engines.node` does not admit `version`. */
const packagesExcluding = (
  version: string,
  root: string = ROOT
): Array<{ readonly name: string; readonly declares: string }> => {
  const lock = readJson(path.join(root, "package-lock.json"))
  const found = new Map<string, string>()
  for (const location of Object.keys(lock.packages)) {
    if (!location.startsWith("node_modules/")) continue
    const manifest = path.join(root, location, "package.json")
    if (!fs.existsSync(manifest)) continue // an optional package for another platform
    const { name, engines } = readJson(manifest)
    const declares = engines?.node
    if (typeof declares === "string" && !semver.satisfies(version, declares, { includePrerelease: true })) {
      found.set(name, declares)
    }
  }
  return [...found].map(([name, declares]) => ({ name, declares })).sort((a, b) => a.name.localeCompare(b.name))
}

/** The rows of the README's table under "## Node.js versions": `| \`package\` | \`declares\` | why |`. */
const readmeTable = (): Array<{ readonly name: string; readonly declares: string }> => {
  const section = readmeSection("Node.js versions")
  expect(section, "README.md has a section \"## Node.js versions\"").toBeDefined()
  return [...section!.matchAll(/^\| `([^`]+)` \| `([^`]+)` \|/gm)]
    .map(([, name, declares]) => ({ name: name!, declares: declares! }))
    .sort((a, b) => a.name.localeCompare(b.name))
}

describe("Node.js versions", () => {
  it("engines.node is a floor, the Node running the tests meets it, and the README states it", () => {
    const range = ourRange()
    expect(range).toMatch(/^>=\s*\d+\.\d+(\.\d+)?$/)
    expect(semver.satisfies(process.version, range), `${process.version} against ${range}`).toBe(true)
    const floor = semver.minVersion(range)!
    const readme = fs.readFileSync(path.join(ROOT, "README.md"), "utf8")
    expect(readme).toContain(`Node.js ${floor.major}.${floor.minor} or newer`)
  })

  it("the packages npm warns about (EBADENGINE) on the lowest Node we claim are exactly the README's table", () => {
    const floor = semver.minVersion(ourRange())!.version
    const excluding = packagesExcluding(floor)
    // The check bites: on Node 20 the installed tree has such packages (a Node 22 floor would have none).
    expect(excluding.length).toBeGreaterThan(0)
    expect(readmeTable()).toEqual(excluding)
  })
})
