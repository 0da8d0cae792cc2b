/** Channels: the console channel's lines, the file channel's JSON lines (0600), failures as DeliveryFailure. */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { ConsoleChannel, FileChannel, replyOf } from "../../src/agent/index.js"
import type { DeliveryEntry } from "../../src/delivery/index.js"

const entry = (id: string, body: unknown, to = "alice"): DeliveryEntry => ({
  id,
  seq: 1,
  message: { channel: "test", to, body },
  enqueuedAt: 0,
  attempts: 0,
  status: "pending"
})

const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-channel-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

describe("Channel", () => {
  it.effect("ConsoleChannel writes one line per entry: the recipient and the reply text", () =>
    Effect.gen(function*() {
      const lines: Array<string> = []
      const channel = ConsoleChannel({ write: (line) => void lines.push(line) })
      yield* channel.send(entry("1", { session: "alice", kind: "user", text: "hi there", messages: 1 }))
      yield* channel.send(entry("2", { other: true }, "bob"))
      assert.strictEqual(channel.name, "console")
      assert.deepStrictEqual(lines, ["[alice] hi there", `[bob] {"other":true}`])
    }))

  it.effect("ConsoleChannel: a write that throws is a retryable DeliveryFailure", () =>
    Effect.gen(function*() {
      const channel = ConsoleChannel({
        write: () => {
          throw new Error("EPIPE")
        }
      })
      const failure = yield* Effect.flip(channel.send(entry("1", { session: "a", text: "x" })))
      assert.strictEqual(failure._tag, "DeliveryFailure")
      assert.include(failure.message, "EPIPE")
      assert.notStrictEqual(failure.permanent, true)
    }))

  it.effect("FileChannel appends one JSON line per delivery to a 0600 file (folders created 0700)", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const file = path.join(dir, "nested", "outbox.jsonl")
      yield* Effect.scoped(Effect.gen(function*() {
        const channel = yield* FileChannel({ path: file, sync: true })
        yield* channel.send(entry("1", { session: "alice", text: "one" }))
        yield* Effect.forEach(["2", "3", "4"], (id) => channel.send(entry(id, { session: "alice", text: id })), {
          concurrency: 3
        })
      }))
      const lines = fs.readFileSync(file, "utf8").trimEnd().split("\n").map((l) => JSON.parse(l))
      assert.deepStrictEqual(lines[0], { id: "1", to: "alice", body: { session: "alice", text: "one" } })
      assert.deepStrictEqual(lines.map((l) => l.id).sort(), ["1", "2", "3", "4"])
      assert.strictEqual(fs.statSync(file).mode & 0o777, 0o600)
      assert.strictEqual(fs.statSync(path.dirname(file)).mode & 0o777, 0o700)
    }))

  it.effect("FileChannel appends after what the file holds, with a custom line format", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const file = path.join(dir, "outbox.jsonl")
      fs.writeFileSync(file, `{"id":"old"}\n`, { mode: 0o600 })
      yield* Effect.scoped(Effect.gen(function*() {
        const channel = yield* FileChannel({
          path: file,
          name: "outbox",
          format: (e) => ({ id: e.id, text: replyOf(e)?.text })
        })
        assert.strictEqual(channel.name, "outbox")
        yield* channel.send(entry("new", { session: "s", text: "hello" }))
      }))
      assert.deepStrictEqual(fs.readFileSync(file, "utf8"), `{"id":"old"}\n{"id":"new","text":"hello"}\n`)
    }))

  it.effect("FileChannel: a body that cannot be encoded is a permanent DeliveryFailure", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir
      const channel = yield* FileChannel({ path: path.join(dir, "o.jsonl"), format: () => ({ big: BigInt(1) }) })
      const failure = yield* Effect.flip(channel.send(entry("1", {})))
      assert.strictEqual(failure.permanent, true)
    }))

  it.effect("replyOf reads an agent's reply body, and nothing else", () =>
    Effect.sync(() => {
      assert.deepStrictEqual(
        replyOf(entry("1", { session: "s", kind: "cron", text: "t", messages: 1, job: "j", turn: 3 })),
        {
          session: "s",
          kind: "cron",
          text: "t",
          messages: 1,
          job: "j",
          turn: 3
        }
      )
      assert.strictEqual(replyOf(entry("2", "plain string")), undefined)
      assert.strictEqual(replyOf(entry("3", { text: "no session" })), undefined)
    }))
})
