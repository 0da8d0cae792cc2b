/** The transcript store: bounded history, the journal of accepted messages, atomic 0600 files. */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Transcripts } from "../../src/agent/index.js"

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-transcripts-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

const answer = (store: Transcripts.Transcripts, session: string, text: string) =>
  Effect.gen(function*() {
    const [m] = yield* store.accept(session, [text])
    return yield* store.record(session, {
      kind: "user",
      answered: [m!.seq],
      user: [text],
      reply: `re: ${text}`,
      to: session
    })
  })

describe("Transcripts", () => {
  it.effect("a session keeps only its last historyLimit turns", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* Transcripts.make({ dir, historyLimit: 2, fsync: false })
      for (const text of ["one", "two", "three"]) yield* answer(store, "s", text)
      const state = yield* store.load("s")
      assert.deepStrictEqual(state.turns.map((t) => [t.n, t.user, t.reply]), [[2, ["two"], "re: two"], [
        3,
        ["three"],
        "re: three"
      ]])
      assert.deepStrictEqual(Transcripts.toMessages(state, ["four"]).map((m) => `${m.role}:${m.content}`), [
        "user:two",
        "assistant:re: two",
        "user:three",
        "assistant:re: three",
        "user:four"
      ])
    }))

  it.effect("the transcript persists: a new store over the same folder reads it back", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const first = yield* Transcripts.make({ dir, fsync: true })
      yield* answer(first, "alice", "hello")
      yield* first.accept("alice", ["still waiting"])
      const second = yield* Transcripts.make({ dir })
      const state = yield* second.load("alice")
      assert.deepStrictEqual(state.turns.map((t) => t.reply), ["re: hello"])
      assert.deepStrictEqual(state.pending.map((m) => [m.seq, m.text]), [[2, "still waiting"]])
      assert.deepStrictEqual(yield* second.sessions, ["alice"])
    }))

  it.effect("accepted messages stay pending until a turn answers them or they are dropped", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* Transcripts.make({ dir, fsync: false })
      const added = yield* store.accept("s", ["a", "b", "c"])
      assert.deepStrictEqual(added.map((m) => m.seq), [1, 2, 3])
      yield* store.record("s", { kind: "user", answered: [1, 2], user: ["a", "b"], reply: "ab", to: "s" })
      yield* store.drop("s", [3])
      const state = yield* store.load("s")
      assert.deepStrictEqual(state.pending, [])
      assert.strictEqual(state.unsent?.n, 1)
      yield* store.markSent("s", 1)
      assert.strictEqual((yield* store.load("s")).unsent, undefined)
    }))

  it.effect("a write that finds the folder gone (deleted under a running agent) says so, not only ENOENT of a temp file", () =>
    Effect.gen(function*() {
      const root = yield* tempDir
      const dir = path.join(root, "sessions")
      const store = yield* Transcripts.make({ dir, fsync: false })
      yield* store.accept("s", ["a"])
      fs.rmSync(dir, { recursive: true })
      const error = yield* Effect.flip(store.accept("s", ["b"]))
      assert.strictEqual(error.reason, "io")
      assert.strictEqual(
        error.message,
        `cannot write ${path.join(dir, "s.json")}: the folder ${dir} is gone (deleted while the agent ran?): ` +
          "nothing can be kept until the agent is restarted, which makes it again"
      )
    }))

  it.effect("files are 0600 in a 0700 folder, replaced atomically (no temp file is left)", () =>
    Effect.gen(function*() {
      const root = yield* tempDir
      const dir = path.join(root, "sessions")
      const store = yield* Transcripts.make({ dir, fsync: false })
      for (let i = 0; i < 5; i++) yield* answer(store, "cron:report", `tick ${i}`)
      assert.strictEqual(fs.statSync(dir).mode & 0o777, 0o700)
      const files = fs.readdirSync(dir)
      assert.deepStrictEqual(files, [Transcripts.sessionFileName("cron:report")])
      assert.strictEqual(fs.statSync(path.join(dir, files[0]!)).mode & 0o777, 0o600)
    }))

  it.effect("session ids become safe file names (no path escapes, long ids hashed)", () =>
    Effect.sync(() => {
      assert.strictEqual(Transcripts.sessionFileName("local"), "local.json")
      assert.notInclude(Transcripts.sessionFileName("../../etc/passwd"), "/")
      assert.notInclude(Transcripts.sessionFileName(".."), "..")
      assert.match(Transcripts.sessionFileName("x".repeat(500)), /^h-[0-9a-f]{64}\.json$/)
      assert.notStrictEqual(Transcripts.sessionFileName("a/b"), Transcripts.sessionFileName("a%2Fb"))
    }))

  it.effect("updates of one session are serialised: concurrent accepts lose nothing", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* Transcripts.make({ dir, fsync: false })
      yield* Effect.forEach(Array.from({ length: 20 }, (_, i) => `m${i}`), (t) => store.accept("s", [t]), {
        concurrency: "unbounded"
      })
      const state = yield* store.load("s")
      assert.strictEqual(state.pending.length, 20)
      assert.deepStrictEqual(
        state.pending.map((m) => m.seq).sort((a, b) => a - b),
        Array.from({ length: 20 }, (_, i) => i + 1)
      )
    }))

  it.effect("a corrupt transcript fails with TranscriptError corrupt naming the file", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const store = yield* Transcripts.make({ dir, fsync: false })
      fs.writeFileSync(path.join(dir, "s.json"), "{ not json")
      const exit = yield* Effect.exit(store.load("s"))
      assert.isTrue(Exit.isFailure(exit))
      const error = yield* Effect.flip(store.load("s"))
      assert.strictEqual(error.reason, "corrupt")
      assert.strictEqual(error.path, path.join(dir, "s.json"))
    }))
})
