/**
 * The agent under real faults: a real full disk (a 1 MiB tmpfs as the state folder, or as the
 * delivery log's folder), filled and freed while a turn runs: the message is kept, no `*.tmp` is
 * left, errors name ENOSPC and the path, and the agent answers again by itself, without a restart.
 * Real signals: SIGHUP to a child running the agent drains it and exits 0; a second one exits 129.
 * The tmpfs cases need root (mount); without it they are skipped with one line, and under CI=true
 * that is a failure.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { AgentConfigInvalid } from "../../src/agent/index.js"
import type { AgentEvent } from "../../src/agent/index.js"
import { DeliveryLog } from "../../src/delivery/index.js"
import { nodeArgs } from "../support/node.js"
import { bodyOf, gated, harness, isDelivered, tempDir } from "./harness.js"

const canMount = (() => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-mount-probe-"))
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", dir], { stdio: "ignore" })
    execFileSync("umount", [dir], { stdio: "ignore" })
    return true
  } catch {
    return false
  } finally {
    fs.rmdirSync(dir)
  }
})()
if (!canMount) {
  if (process.env.CI === "true") {
    throw new Error("full-disk agent tests need `mount -t tmpfs` (root); CI=true does not allow skipping them")
  }
  console.log("skipping the full-disk agent tests: `mount -t tmpfs` is not allowed here (needs root)")
}

/** A 1 MiB tmpfs mounted on a fresh folder, unmounted (and removed) when the scope closes. */
const tmpfs = Effect.acquireRelease(
  Effect.sync(() => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-full-"))
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", dir])
    return dir
  }),
  (dir) =>
    Effect.sync(() => {
      try {
        execFileSync("umount", [dir], { stdio: "ignore" })
      } catch {
        execFileSync("umount", ["-l", dir], { stdio: "ignore" })
      }
      fs.rmdirSync(dir)
    })
)

/** Fills the file system of `dir` until ENOSPC (64 KiB writes, then 4 KiB ones); returns the filler's path. */
const fill = (dir: string): string => {
  const file = path.join(dir, "filler")
  const fd = fs.openSync(file, "w")
  try {
    for (const size of [65_536, 4_096, 512]) {
      const chunk = Buffer.alloc(size, 1)
      try {
        while (true) fs.writeSync(fd, chunk)
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOSPC") throw e
      }
    }
  } finally {
    fs.closeSync(fd)
  }
  return file
}

const tempFiles = (dir: string): Array<string> =>
  fs.readdirSync(dir, { recursive: true }).map(String).filter((name) => name.endsWith(".tmp"))

const failed = (e: AgentEvent): e is Extract<AgentEvent, { type: "turn-failed" }> => e.type === "turn-failed"

describe("Agent on a real full disk", () => {
  it.live.skipIf(!canMount)(
    "state folder full during a turn: message kept, typed ENOSPC errors naming the file, no *.tmp; freed: answered without a restart",
    () =>
      Effect.gen(function*() {
        const stateDir = yield* tmpfs
        const model = gated()
        const { agent, delivered, events, waitFor } = yield* harness(model.service, {
          stateDir,
          fsync: "always",
          beforeClose: model.releaseAll
        })
        yield* agent.send("local", "before")
        yield* model.calls(1)
        const filler = fill(stateDir)
        yield* model.release(0)
        yield* waitFor(failed)
        const failure = events.find(failed)!
        assert.isTrue(failure.kept)
        assert.strictEqual(failure.messages, 1)
        assert.include(failure.error, "ENOSPC")
        assert.include(failure.error, path.join(stateDir, "sessions", "local.json"))
        const refused = yield* Effect.flip(agent.send("local", "during"))
        assert.strictEqual(refused._tag, "TranscriptError")
        assert.include(refused.message, "ENOSPC")
        assert.deepStrictEqual(tempFiles(stateDir), [])
        assert.deepStrictEqual((yield* agent.unanswered).map((s) => s.messages), [1])
        fs.rmSync(filler)
        // No restart: the automatic retry (1 s, then 5 s) answers it.
        yield* model.calls(2)
        yield* model.release(1)
        yield* waitFor(isDelivered)
        const after = yield* agent.send("local", "after")
        yield* model.calls(3)
        yield* model.release(2)
        yield* after.await
        yield* waitFor(isDelivered, 2)
        assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: before", "You said: after"])
        assert.deepStrictEqual(yield* agent.unanswered, [])
        assert.deepStrictEqual(tempFiles(stateDir), [])
      }),
    30_000
  )

  it.live.skipIf(!canMount)(
    "delivery log's disk full: the turn fails on the log (health failing); freed: the log heals and the agent answers by itself",
    () =>
      Effect.gen(function*() {
        const logDir = yield* tmpfs
        const stateDir = yield* tempDir
        const log = yield* DeliveryLog.open({ dir: path.join(logDir, "deliveries") })
        const model = gated()
        const { agent, delivered, events, waitFor } = yield* harness(model.service, {
          stateDir,
          log,
          beforeClose: model.releaseAll
        })
        yield* agent.send("local", "before")
        yield* model.calls(1)
        const filler = fill(logDir)
        yield* model.release(0)
        yield* waitFor(failed)
        assert.include(events.find(failed)!.error, "ENOSPC")
        const health = (yield* agent.snapshot).log
        assert.strictEqual(health.status, "failing")
        fs.rmSync(filler)
        // The transcript holds the reply (unsent): the retried turn logs it without another model call.
        yield* waitFor(isDelivered)
        const after = yield* agent.send("local", "after")
        yield* model.calls(2)
        yield* model.release(1)
        yield* after.await
        yield* waitFor(isDelivered, 2)
        assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: before", "You said: after"])
        assert.deepStrictEqual((yield* agent.snapshot).log, { status: "ok" })
      }),
    60_000
  )
})

const fixture = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "agentMain.ts")

interface Child {
  readonly child: ReturnType<typeof spawn>
  readonly out: () => string
  readonly exited: Promise<number | null>
  /** Resolves once standard output contains `text`. */
  readonly printed: (text: string) => Promise<void>
}

/** Starts the agent child; resolves once it accepted its message. */
const startChild = (dir: string, latencyMs: number) =>
  Effect.promise(() =>
    new Promise<Child>((resolve, reject) => {
      const child = spawn(process.execPath, [
        ...nodeArgs(fixture),
        path.join(dir, "state"),
        path.join(dir, "outbox.jsonl"),
        String(latencyMs)
      ], {
        stdio: ["ignore", "pipe", "pipe"]
      })
      let out = ""
      let err = ""
      const waiters: Array<{ readonly text: string; readonly done: () => void }> = []
      const exited = new Promise<number | null>((done) => child.on("exit", (code) => done(code)))
      const printed = (text: string) =>
        new Promise<void>((done) => (out.includes(text) ? done() : waiters.push({ text, done })))
      child.stderr!.setEncoding("utf8").on("data", (d: string) => (err += d))
      child.stdout!.setEncoding("utf8").on("data", (d: string) => {
        out += d
        for (const w of waiters) if (out.includes(w.text)) w.done()
        if (out.includes("accepted\n")) resolve({ child, out: () => out, exited, printed })
      })
      void exited.then((code) => reject(new Error(`the agent child exited (${code}) before accepting: ${err}`)))
    })
  )

describe("Agent main and signals", () => {
  it.live(
    "SIGHUP is a graceful shutdown: the turn in flight finishes, its reply is delivered, exit 0",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const { child, out, exited, printed } = yield* startChild(dir, 1_500)
        child.kill("SIGHUP")
        yield* Effect.promise(() => printed("stopping SIGHUP"))
        const code = yield* Effect.promise(() => exited)
        assert.strictEqual(code, 0)
        const stopped = JSON.parse(out().trim().split("\n").at(-1)!)
        assert.strictEqual(stopped.reason, "SIGHUP")
        assert.deepStrictEqual(stopped.report.drain, { completed: 1, canceled: 0, timedOut: false })
        assert.strictEqual(stopped.report.unanswered, 0)
        const lines = fs.readFileSync(path.join(dir, "outbox.jsonl"), "utf8").trim().split("\n").map((l) =>
          JSON.parse(l)
        )
        assert.deepStrictEqual(lines.map((l) => l.body.text), ["You said: hello"])
      }),
    30_000
  )

  it.live("a second SIGHUP during the drain exits at once with 129", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const { child, exited, printed } = yield* startChild(dir, 60_000)
      child.kill("SIGHUP")
      yield* Effect.promise(() => printed("stopping SIGHUP"))
      child.kill("SIGHUP")
      const code = yield* Effect.promise(() => exited)
      assert.strictEqual(code, 129)
    }), 30_000)
})

describe("Agent state folder paths", () => {
  // Under TestClock: a retry or a wait on the clock would never end (the test times out), so "at once"
  // is checked without reading a wall clock.
  it.effect(
    "a bad stateDir fails make at once with AgentConfigInvalid naming the path and the system's reason (no spin on /proc)",
    () =>
      Effect.gen(function*() {
        const dir = yield* tempDir
        const file = path.join(dir, "a-file")
        fs.writeFileSync(file, "")
        const underFile = (yield* Effect.flip(
          Effect.scoped(harness(gated().service, { stateDir: path.join(file, "state") }))
        )) as AgentConfigInvalid
        assert.instanceOf(underFile, AgentConfigInvalid)
        assert.include(underFile.message, "ENOTDIR")
        assert.include(underFile.message, path.join(file, "state"))
        assert.notInclude(underFile.message, "Error: ")
        const proc = (yield* Effect.flip(
          Effect.scoped(harness(gated().service, { stateDir: "/proc/forbidden/state" }))
        )) as AgentConfigInvalid
        assert.strictEqual(proc.field, "stateDir")
        assert.include(proc.message, "/proc/forbidden")
        assert.notInclude(proc.message, "\n")
      }),
    10_000
  )
})
