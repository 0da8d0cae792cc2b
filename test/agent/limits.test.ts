/**
 * Sizes and counts: a message over `maxRecordBytes` is refused at `send` (typed, nothing accepted);
 * a reply over one record is delivered as several entries of one turn, in order, split between code
 * points; a reply the log refuses for good is given up and the session moves on (now and after a
 * restart); `maxMessagesPerTurn` caps a model call; the last active session survives a restart.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { TestClock } from "effect/testing"
import * as fs from "node:fs"
import * as path from "node:path"
import { MessageTooLarge, Transcripts } from "../../src/agent/index.js"
import type { AgentEvent } from "../../src/agent/index.js"
import { splitText } from "../../src/agent/replies.js"
import { DeliveryLog, DeliveryLogError } from "../../src/delivery/index.js"
import { bodyOf, gated, harness, isDelivered, recording, started, tempDir, withoutFused } from "./harness.js"

const lone = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/** A file log that refuses, for good, every reply whose text says POISON. */
const poisonLog = (stateDir: string, reason: "invalid" | "too-large") =>
  Effect.map(DeliveryLog.open({ dir: path.join(stateDir, "deliveries"), fsync: "never" }), (real) => ({
    // A wrapper that overrides `append` drops `appendAndMark`, which would append past it.
    ...withoutFused(real),
    append: (m: Parameters<typeof real.append>[0]) =>
      String((m.body as { text?: string }).text).includes("POISON")
        ? Effect.fail(
          new DeliveryLogError({ reason, message: `Expected a message the log accepts, got POISON (${reason})` })
        )
        : real.append(m)
  }))

describe("Agent limits", () => {
  it.effect("a 1.1 MB message is refused at send with MessageTooLarge naming the limit; nothing is accepted; the session goes on", () =>
    Effect.gen(function*() {
      const { agent, delivered, stateDir, waitFor } = yield* harness(recording().service)
      const error = yield* Effect.flip(agent.send("s", "x".repeat(1_100_000)))
      assert.instanceOf(error, MessageTooLarge)
      assert.strictEqual(error._tag, "MessageTooLarge")
      assert.deepStrictEqual([error.limit, error.bytes], [1_048_576, 1_100_000])
      assert.notInclude(error.message, "\n")
      assert.include(error.message, "1048576")
      assert.include(error.message, "maxRecordBytes")
      assert.deepStrictEqual(yield* agent.unanswered, [])
      const store = yield* Transcripts.make({ dir: path.join(stateDir, "sessions") })
      assert.deepStrictEqual((yield* store.load("s")).pending, [])
      yield* Effect.flatMap(agent.send("s", "small"), (f) => f.await)
      yield* waitFor(isDelivered)
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: small"])
    }))

  it.effect("a reply larger than one record is several entries of one turn, in order, never split inside a surrogate pair", () =>
    Effect.gen(function*() {
      const { agent, delivered, waitFor } = yield* harness(recording().service, { maxRecordBytes: 4096 })
      const text = "😀\"é\n".repeat(400) // 3 600 UTF-8 bytes: accepted; its echo needs more than one record
      const result = yield* Effect.flatMap(agent.send("s", text), (f) => f.await)
      const parts = result.ids!.length
      assert.isAbove(parts, 1)
      yield* waitFor(isDelivered, parts)
      assert.deepStrictEqual(delivered.map((e) => e.id), result.ids)
      assert.deepStrictEqual(
        delivered.map((e) => [bodyOf(e).part, bodyOf(e).parts, bodyOf(e).turn]),
        result.ids!.map((_, i) => [i + 1, parts, 1])
      )
      assert.strictEqual(delivered.map((e) => bodyOf(e).text).join(""), `You said: ${text}`)
      for (const e of delivered) assert.notMatch(bodyOf(e).text as string, lone)
    }))

  it("splitText: parts within the budget, on code point boundaries", () => {
    const parts = splitText("a😀b😀😀c", 5)
    assert.deepStrictEqual(parts, ["a😀", "b😀", "😀c"])
    assert.deepStrictEqual(splitText("", 10), [""])
    assert.deepStrictEqual(splitText("\u0001\u0001", 6), ["\u0001", "\u0001"])
  })

  it.effect("a reply the log refuses for good (invalid) fails its turn once (kept: false), and the session moves on; no retry", () =>
    Effect.gen(function*() {
      const stateDir = yield* tempDir
      const log = yield* poisonLog(stateDir, "invalid")
      const { agent, delivered, events, waitFor } = yield* harness(recording().service, { stateDir, log })
      const future = yield* agent.send("s", "POISON")
      assert.isTrue(Exit.isFailure(yield* Effect.exit(future.await)))
      const failure = events.find((e): e is Extract<AgentEvent, { type: "turn-failed" }> => e.type === "turn-failed")!
      assert.deepStrictEqual([failure.kept, failure.retryable, failure.retryInMs, failure.messages], [
        false,
        false,
        undefined,
        0
      ])
      assert.deepStrictEqual(yield* agent.unanswered, [])
      yield* Effect.flatMap(agent.send("s", "fine"), (f) => f.await)
      yield* TestClock.adjust(120_000)
      yield* waitFor(isDelivered)
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: fine"])
      assert.strictEqual(events.filter((e) => e.type === "turn-started").length, 2)
    }))

  it.effect("a transcript left with an unlogged reply the log refuses (from before this fix) does not wedge the session after a restart", () =>
    Effect.gen(function*() {
      const stateDir = yield* tempDir
      const store = yield* Transcripts.make({ dir: path.join(stateDir, "sessions"), fsync: false })
      yield* store.accept("s", ["POISON"])
      yield* store.record("s", { kind: "user", answered: [1], user: ["POISON"], reply: "You said: POISON", to: "s" })
      yield* store.accept("s", ["after"])
      const log = yield* poisonLog(stateDir, "too-large")
      const { delivered, waitFor } = yield* harness(recording().service, { stateDir, log })
      yield* waitFor((e) => e.type === "turn-ended")
      yield* waitFor(isDelivered)
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: after"])
      const state = yield* store.load("s")
      assert.deepStrictEqual([state.unsent, state.pending, state.turns.map((t) => t.reply)], [undefined, [], [
        "You said: POISON",
        "You said: after"
      ]])
    }))

  it.effect("maxMessagesPerTurn: 2 — five messages that wait are answered 2 + 2 + 1, each send's future is the turn that answers it", () =>
    Effect.gen(function*() {
      const model = gated()
      const { agent, events, waitFor } = yield* harness(model.service, {
        maxMessagesPerTurn: 2,
        beforeClose: model.releaseAll
      })
      yield* agent.send("s", "a")
      yield* model.calls(1)
      const futures = []
      for (const t of ["b", "c", "d", "e"]) futures.push(yield* agent.send("s", t))
      yield* agent.sendAll("s", ["f", "g", "h"]) // more than the cap at once: the agent itself owes a follow-up
      for (let i = 0; i < 5; i++) {
        yield* model.calls(i + 1)
        yield* model.release(i)
      }
      yield* waitFor((e) => e.type === "turn-ended", 5)
      const counts = events.filter(started("user")).map((e) => (e as { messages: number }).messages)
      assert.deepStrictEqual(counts, [1, 2, 2, 2, 1])
      assert.deepStrictEqual(model.requests.map((r) => r.transcript.at(-1)!.content), ["a", "c", "e", "g", "h"])
      const results = yield* Effect.forEach(futures, (f) => f.await)
      assert.deepStrictEqual(results.map((r) => r.turn), [2, 2, 3, 3])
    }))

  it.effect("the last active session survives a restart: heartbeat replies go to it", () =>
    Effect.gen(function*() {
      const stateDir = yield* tempDir
      yield* Effect.scoped(Effect.gen(function*() {
        const { agent } = yield* harness(recording().service, { stateDir })
        yield* Effect.flatMap(agent.send("alice", "hi"), (f) => f.await)
        yield* Effect.flatMap(agent.send("bob", "hi"), (f) => f.await)
        yield* Effect.flatMap(agent.send("alice", "again"), (f) => f.await)
        yield* Effect.flatMap(agent.send("bob", "last"), (f) => f.await)
      }))
      const { agent, delivered, waitFor } = yield* harness(recording().service, {
        stateDir,
        heartbeat: { everyMs: 1_000, prompt: "Anything new?" },
        defaultSession: "nobody"
      })
      assert.strictEqual(agent.lastActiveSession(), "bob")
      yield* TestClock.adjust(1_000)
      yield* waitFor(isDelivered)
      assert.deepStrictEqual(delivered.map((e) => e.message.to), ["bob"])
    }))

  it.effect("transcripts: stale *.tmp files are removed on open; other files are left alone", () =>
    Effect.gen(function*() {
      const dir = path.join(yield* tempDir, "sessions")
      fs.mkdirSync(dir)
      fs.writeFileSync(path.join(dir, "s.json.4242.7.tmp"), "{")
      fs.writeFileSync(path.join(dir, "notes.tmp"), "mine")
      yield* Transcripts.make({ dir })
      assert.deepStrictEqual(fs.readdirSync(dir).sort(), ["notes.tmp"])
    }))

  it.effect("bad maxMessagesPerTurn / maxRecordBytes fail make naming the field", () =>
    Effect.gen(function*() {
      const e1 = yield* Effect.flip(Effect.scoped(harness(recording().service, { maxMessagesPerTurn: 0 })))
      assert.strictEqual((e1 as { field?: string }).field, "maxMessagesPerTurn")
      const e2 = yield* Effect.flip(Effect.scoped(harness(recording().service, { maxRecordBytes: 1.5 })))
      assert.strictEqual((e2 as { field?: string }).field, "maxRecordBytes")
    }))
})
