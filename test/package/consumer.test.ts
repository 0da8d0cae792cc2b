// The package as a consumer gets it: `npm pack` of the project (dist built fresh from src), the tarball
// installed into an empty project beside `effect`, a file importing every entry point type-checked under
// moduleResolution NodeNext (skipLibCheck off, so our .d.ts files are checked too) and run with plain node.
// The optional peers are left out at first: switchyard, /queue, /delivery and /agent must work without
// them; /cluster is checked after @effect/sql-pg and @effect/platform-node are added.
// Installs come from the npm cache (`npm ci` of the repo filled it), so this needs no network.
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { promisify } from "node:util"
import { afterAll, beforeAll, describe, expect, it } from "vitest"

const run = promisify(execFile)
const root = path.resolve(import.meta.dirname, "../..")
const tsc = path.join(root, "node_modules/typescript-native/bin/tsc")
const manifest = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as {
  readonly name: string
  readonly version: string
  readonly files: ReadonlyArray<string>
}

/** The exact version installed here, so the consumer's install is served from the cache. */
const installed = (name: string): string => {
  const file = path.join(root, "node_modules", name, "package.json")
  return `${name}@${(JSON.parse(fs.readFileSync(file, "utf8")) as { version: string }).version}`
}

const npm = async (cwd: string, args: ReadonlyArray<string>): Promise<string> => {
  const { stdout } = await run("npm", [...args], {
    cwd,
    env: { ...process.env, npm_config_update_notifier: "false", npm_config_fund: "false", npm_config_audit: "false" },
    maxBuffer: 16 * 1024 * 1024
  })
  return stdout
}

const install = (cwd: string, specs: ReadonlyArray<string>) =>
  npm(cwd, ["install", "--prefer-offline", "--no-audit", "--no-fund", "--no-package-lock", ...specs])

/** Type-checks and emits `file` (NodeNext, strict, skipLibCheck off), then runs the emitted JS with plain node. */
const checkAndRun = async (app: string, file: string): Promise<string> => {
  const tsconfig = {
    compilerOptions: {
      target: "ES2022",
      // effect's own .d.ts files name Web Crypto and Storage types, so an Effect consumer needs DOM's lib.
      lib: ["ES2022", "DOM"],
      module: "NodeNext",
      moduleResolution: "NodeNext",
      strict: true,
      exactOptionalPropertyTypes: true,
      verbatimModuleSyntax: true,
      skipLibCheck: false,
      types: ["node"],
      outDir: "out"
    },
    files: [file]
  }
  fs.writeFileSync(path.join(app, "tsconfig.json"), JSON.stringify(tsconfig, null, 2))
  try {
    await run(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: app })
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string }
    throw new Error(
      `Expected ${file} to type-check in the consumer project, tsc said:\n${stdout ?? ""}${stderr ?? ""}`,
      {
        cause: error
      }
    )
  }
  const { stdout } = await run(process.execPath, [path.join("out", file.replace(/\.ts$/, ".js"))], { cwd: app })
  return stdout
}

// Uses each entry point for real: a Promise-API queue and an Effect queue run a task, a delivery log on disk
// takes an entry and the delivery queue delivers it, the scripted model answers a turn.
const CORE = `import { Effect, type Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { createCommandQueue, type AsyncFuture } from "switchyard"
import { CommandQueue } from "switchyard/queue"
import { DeliveryLog, DeliveryQueue } from "switchyard/delivery"
import { Model, ScriptedModel, type TranscriptMessage } from "switchyard/agent"

const promiseQueue = await createCommandQueue()
const future: AsyncFuture<number> = promiseQueue.dispatch("main", "session:1", () => 20 + 1)
const promiseResult = await future.result
await promiseQueue.close()

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-consumer-log-"))
const delivered: Array<unknown> = []
const transcript: Array<TranscriptMessage> = [{ role: "user", content: "hello" }]
// The spec's spellings: each name is a type too (\`log: DeliveryLog\`), and a namespace of types.
const outboxOf = (log: DeliveryLog, _options?: DeliveryLog.OpenOptions): Effect.Effect<DeliveryQueue, never, Scope.Scope> =>
  DeliveryQueue.make({ log, deliver: (entry) => Effect.sync(() => void delivered.push(entry.message.body)) })
export const typed: [CommandQueue.CommandQueue, DeliveryQueue.Options] | CommandQueue | undefined = undefined
const effectResult = await Effect.runPromise(Effect.scoped(Effect.gen(function* () {
  const queue = yield* CommandQueue.make()
  const task = yield* queue.dispatch("main", "session:2", Effect.succeed("from the Effect queue"))
  const result = yield* task.await
  const log = yield* DeliveryLog.open({ dir })
  const outbox = yield* outboxOf(log)
  yield* outbox.enqueue({ channel: "console", to: "42", body: { text: result } })
  yield* outbox.idle
  const model = yield* Model
  const reply = yield* model.reply({ system: "", transcript, maxTokens: 64 })
  return { result, reply: reply.text }
}).pipe(Effect.provide(ScriptedModel.layer({ latencyMs: 0 })))))
fs.rmSync(dir, { recursive: true, force: true })
// @ts-expect-error a wrong type must be an error (the declarations are real, not any)
export const wrong: number = CommandQueue.make
console.log(JSON.stringify({ promiseResult, ...effectResult, delivered }))
`

/** A few names each entry point must export (what the README's table says it holds). */
const EXPECTED: Readonly<Record<string, ReadonlyArray<string>>> = {
  switchyard: ["CommandQueue", "createLanes", "createCommandQueue", "DeliveryLog", "DeliveryQueue", "Agent", "Model"],
  "switchyard/queue": ["CommandQueue", "createLanes", "createCommandQueue", "QueueFailure"],
  "switchyard/delivery": ["DeliveryLog", "DeliveryQueue", "DeliveryFailure"],
  "switchyard/agent": ["Agent", "Model", "ScriptedModel", "AnthropicModel", "Transcripts", "serve", "runMain"],
  "switchyard/cluster": ["ClusterQueue", "PgDeliveryLog", "ClusterDelivery", "ClusterAgent", "Runner"]
}

// Every entry point imported by name with plain node: what each exports, and whether anything of undici
// (which does not load on Node 20, see README "Node.js versions") was loaded on the way.
const PROBE = `import { createRequire } from "node:module"
const exports = {}
for (const entry of ${JSON.stringify(Object.keys(EXPECTED))}) exports[entry] = Object.keys(await import(entry))
const loaded = Object.keys(createRequire(import.meta.url).cache)
console.log(JSON.stringify({ node: process.version, exports, undici: loaded.filter((file) => /[\\\\/]undici[\\\\/]/.test(file)) }))
`

// Without Postgres nothing of the cluster can start; this checks that the entry point loads and its
// namespaces are there, and (at compile time) that its option types are usable.
const CLUSTER = `import * as Cluster from "switchyard/cluster"
import type { ClusterQueueOptions, PgDeliveryLogOptions } from "switchyard/cluster"

type Named = [ClusterQueueOptions, PgDeliveryLogOptions]
const names: ReadonlyArray<keyof typeof Cluster> = Object.keys(Cluster) as Array<keyof typeof Cluster>
const kinds = names.map((name) => [name, typeof Cluster[name]])
const checked: Named | undefined = undefined
console.log(JSON.stringify({ kinds, checked: checked === undefined }))
`

describe("the packed package, installed by a consumer", () => {
  let tmp = ""
  let app = ""

  beforeAll(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-pack-"))
    const stage = path.join(tmp, "stage")
    fs.mkdirSync(stage)
    for (const entry of [...manifest.files.filter((f) => f !== "dist"), "package.json", "README.md", "LICENSE"]) {
      if (fs.existsSync(path.join(root, entry))) {
        fs.cpSync(path.join(root, entry), path.join(stage, entry), { recursive: true })
      }
    }
    await run(process.execPath, [
      tsc,
      "-p",
      path.join(root, "tsconfig.build.json"),
      "--outDir",
      path.join(stage, "dist")
    ])
    const packed = JSON.parse(
      await npm(stage, ["pack", "--ignore-scripts", "--json", "--pack-destination", tmp])
    ) as Array<
      { readonly filename: string }
    >
    app = path.join(tmp, "app")
    fs.mkdirSync(app)
    fs.writeFileSync(
      path.join(app, "package.json"),
      JSON.stringify({ name: "consumer", private: true, type: "module" })
    )
    await install(app, [path.join(tmp, packed[0]!.filename), installed("effect"), installed("@types/node")])
  }, 240_000)

  afterAll(() => {
    if (tmp !== "") fs.rmSync(tmp, { recursive: true, force: true })
  })

  it("installs without the optional peers; switchyard, /queue, /delivery and /agent type-check and run", async () => {
    const modules = fs.readdirSync(path.join(app, "node_modules"))
    expect(modules).toContain(manifest.name)
    expect(modules).not.toContain("@anthropic-ai")
    expect(fs.existsSync(path.join(app, "node_modules/@effect/sql-pg"))).toBe(false)
    fs.writeFileSync(path.join(app, "core.ts"), CORE)
    const out = JSON.parse(await checkAndRun(app, "core.ts")) as unknown
    expect(out).toEqual({
      promiseResult: 21,
      result: "from the Effect queue",
      reply: "You said: hello",
      delivered: [{ text: "from the Effect queue" }]
    })
  }, 120_000)

  it("with @effect/sql-pg and @effect/platform-node added, switchyard/cluster type-checks and loads", async () => {
    await install(app, [installed("@effect/sql-pg"), installed("@effect/platform-node")])
    fs.writeFileSync(path.join(app, "cluster.ts"), CLUSTER)
    const out = JSON.parse(await checkAndRun(app, "cluster.ts")) as {
      kinds: Array<[string, string]>
      checked: boolean
    }
    const kinds = Object.fromEntries(out.kinds)
    expect(Object.keys(kinds)).toEqual(
      expect.arrayContaining(["ClusterQueue", "PgDeliveryLog", "ClusterDelivery", "ClusterLayer", "Runner"])
    )
    for (const [name, kind] of out.kinds) expect([name, kind]).toEqual([name, "object"])
    expect(out.checked).toBe(true)
  }, 240_000)

  it(
    "every entry point loads by name with plain node on this Node, exports its names, and none loads undici",
    async () => {
      // After the test above: the optional peers are installed, so /cluster loads too.
      fs.writeFileSync(path.join(app, "probe.mjs"), PROBE)
      const { stdout } = await run(process.execPath, ["probe.mjs"], { cwd: app })
      const report = JSON.parse(stdout) as {
        node: string
        exports: Record<string, ReadonlyArray<string>>
        undici: ReadonlyArray<string>
      }
      expect(report.node).toBe(process.version)
      for (const [entry, names] of Object.entries(EXPECTED)) {
        expect(report.exports[entry], entry).toEqual(expect.arrayContaining([...names]))
      }
      expect(report.undici).toEqual([])
    },
    60_000
  )
})
