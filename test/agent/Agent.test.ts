/**
 * The agent runtime with the scripted model (or a gated model the test releases) and the TestClock:
 * coalesced turns, sessions side by side, heartbeat, cron, durability before delivery, transcripts,
 * recovery, shutdown. Coordination is agent events and Deferreds, never sleeps.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Option } from "effect"
import { TestClock } from "effect/testing"
import * as fs from "node:fs"
import * as path from "node:path"
import { Transcripts } from "../../src/agent/index.js"
import type { AgentOptions, Channel } from "../../src/agent/index.js"
import { DeliveryLog } from "../../src/delivery/index.js"
import type { DeliveryEntry } from "../../src/delivery/index.js"
import { bodyOf, gated, harness, isDelivered, recording, started, tempDir } from "./harness.js"

describe("Agent", () => {
  it.effect("messages that arrive while a session's turn runs are answered together by the next turn (one model call)", () =>
    Effect.gen(function*() {
      const model = recording(100)
      const { agent, delivered, waitFor } = yield* harness(model.service)
      const first = yield* agent.send("s", "a")
      yield* waitFor(started("user", 1))
      const second = yield* agent.send("s", "b")
      const third = yield* agent.send("s", "c")
      assert.strictEqual(second.runId, third.runId)
      assert.notStrictEqual(first.runId, second.runId)
      yield* TestClock.adjust(100)
      const r1 = yield* first.await
      assert.deepStrictEqual([r1.text, r1.messages], ["You said: a", 1])
      yield* waitFor(started("user", 2))
      yield* TestClock.adjust(100)
      const r2 = yield* third.await
      assert.deepStrictEqual([r2.text, r2.messages], ["You said: b / c", 2])
      assert.strictEqual(model.requests.length, 2)
      yield* waitFor(isDelivered, 2)
      assert.deepStrictEqual(delivered.map((e) => [e.message.to, bodyOf(e).text, bodyOf(e).messages, bodyOf(e).kind]), [
        ["s", "You said: a", 1, "user"],
        ["s", "You said: b / c", 2, "user"]
      ])
    }))

  it.effect("sendAll accepts several messages in one write; one turn answers them all; the heartbeat and cron sessions are not for users", () =>
    Effect.gen(function*() {
      const model = recording()
      const { agent } = yield* harness(model.service)
      const result = yield* Effect.flatMap(agent.sendAll("s", ["x", "y", "z"]), (f) => f.await)
      assert.deepStrictEqual([result.text, result.messages], ["You said: x / y / z", 3])
      assert.strictEqual(model.requests.length, 1)
      const refused = yield* Effect.flip(agent.sendAll("s", []))
      assert.strictEqual(refused._tag, "RequestError")
      for (const reserved of ["heartbeat", "cron:report"]) {
        assert.strictEqual((yield* Effect.flip(agent.send(reserved, "hi")))._tag, "RequestError")
      }
    }))

  it.effect("different sessions run side by side", () =>
    Effect.gen(function*() {
      const model = gated()
      const { agent } = yield* harness(model.service, { beforeClose: model.releaseAll })
      const a = yield* agent.send("alice", "hi")
      const b = yield* agent.send("bob", "yo")
      yield* model.calls(2) // both turns are in the model at once
      assert.strictEqual(model.requests.length, 2)
      yield* model.releaseFor("yo")
      assert.strictEqual((yield* b.await).text, "You said: yo")
      yield* model.releaseFor("hi")
      assert.strictEqual((yield* a.await).text, "You said: hi")
    }))

  it.effect("a reply is in the delivery log (pending) before the channel is handed it", () =>
    Effect.gen(function*() {
      const seen: Array<Option.Option<DeliveryEntry>> = []
      let log: DeliveryLog.DeliveryLog | undefined
      const channel: Channel = {
        name: "checking",
        send: (entry) =>
          Effect.flatMap(Effect.suspend(() => log!.get(entry.id)), (found) => Effect.sync(() => void seen.push(found)))
      }
      const { agent, waitFor } = yield* harness(recording().service, { channel })
      log = agent.log
      yield* Effect.flatMap(agent.send("s", "durable?"), (f) => f.await)
      yield* waitFor(isDelivered)
      assert.strictEqual(seen.length, 1)
      assert.isTrue(Option.isSome(seen[0]!))
      assert.strictEqual(Option.getOrThrow(seen[0]!).status, "pending")
      assert.deepStrictEqual(Option.getOrThrow(seen[0]!).message.body, {
        session: "s",
        kind: "user",
        text: "You said: durable?",
        messages: 1,
        turn: 1
      })
    }))

  it.effect("heartbeat: a reply of exactly HEARTBEAT_OK is suppressed", () =>
    Effect.gen(function*() {
      const { delivered, events, waitFor } = yield* harness(recording().service, { heartbeat: { everyMs: 1_000 } })
      yield* TestClock.adjust(1_000)
      yield* waitFor((e) => e.type === "heartbeat")
      assert.deepStrictEqual(events.filter((e) => e.type === "heartbeat").map((e) => (e as any).suppressed), [true])
      yield* TestClock.adjust(1_000)
      yield* waitFor((e) => e.type === "heartbeat", 2)
      assert.deepStrictEqual(delivered, [])
    }))

  it.effect("heartbeat: any other reply is delivered to the last active session", () =>
    Effect.gen(function*() {
      const { agent, delivered, waitFor } = yield* harness(recording().service, {
        heartbeat: { everyMs: 1_000, prompt: "Anything new?" },
        defaultSession: "nobody-yet"
      })
      yield* TestClock.adjust(1_000)
      yield* waitFor((e) => e.type === "heartbeat" && !e.suppressed)
      yield* Effect.flatMap(agent.send("alice", "hi"), (f) => f.await)
      yield* TestClock.adjust(1_000)
      yield* waitFor((e) => e.type === "heartbeat" && !e.suppressed, 2)
      yield* waitFor(isDelivered, 3)
      const heartbeats = delivered.filter((e) => bodyOf(e).kind === "heartbeat")
      assert.deepStrictEqual(heartbeats.map((e) => [e.message.to, bodyOf(e).text]), [
        ["nobody-yet", "You said: Anything new?"],
        ["alice", "You said: Anything new?"]
      ])
    }))

  it.effect("heartbeat ticks coalesce: a slow heartbeat turn never piles up ticks", () =>
    Effect.gen(function*() {
      const model = gated()
      const { agent, waitFor } = yield* harness(model.service, {
        heartbeat: { everyMs: 1_000 },
        beforeClose: model.releaseAll
      })
      yield* TestClock.adjust(1_000)
      yield* model.calls(1)
      for (let i = 0; i < 5; i++) yield* TestClock.adjust(1_000)
      const lane = (yield* agent.snapshot).lanes.find((l) => l.lane === "heartbeat")!
      assert.deepStrictEqual([lane.running, lane.waiting], [1, 1])
      assert.strictEqual(model.requests.length, 1)
      yield* model.release(0)
      yield* model.calls(2)
      yield* model.release(1)
      yield* waitFor((e) => e.type === "heartbeat", 2)
      assert.strictEqual(model.requests.length, 2)
    }))

  it.effect("restartLane(heartbeat) ends a stuck heartbeat turn (stale) and the heartbeat goes on", () =>
    Effect.gen(function*() {
      const model = gated()
      const { agent, waitFor } = yield* harness(model.service, {
        heartbeat: { everyMs: 1_000 },
        beforeClose: model.releaseAll
      })
      yield* TestClock.adjust(1_000)
      yield* model.calls(1)
      assert.strictEqual(yield* agent.restartLane("heartbeat"), 1)
      const lane = (yield* agent.snapshot).lanes.find((l) => l.lane === "heartbeat")!
      assert.deepStrictEqual([lane.running, lane.waiting, lane.generation], [0, 0, 1])
      yield* TestClock.adjust(1_000)
      yield* model.calls(2)
      yield* model.release(1)
      yield* waitFor((e) => e.type === "heartbeat" && e.suppressed)
    }))

  it.effect("cron: an overrunning job never overlaps itself; its ticks coalesce into one follow-up run", () =>
    Effect.gen(function*() {
      const model = gated()
      const { agent, delivered, waitFor } = yield* harness(model.service, {
        cron: [{ name: "report", schedule: "* * * * * *", prompt: "status report" }],
        beforeClose: model.releaseAll
      })
      yield* TestClock.adjust(1_000)
      yield* model.calls(1)
      for (let i = 0; i < 4; i++) yield* TestClock.adjust(1_000)
      const lane = (yield* agent.snapshot).lanes.find((l) => l.lane === "cron")!
      assert.deepStrictEqual([lane.running, lane.waiting], [1, 1])
      assert.strictEqual(model.requests.length, 1)
      yield* model.release(0)
      yield* model.calls(2)
      yield* model.release(1)
      yield* waitFor(isDelivered, 2)
      assert.strictEqual(model.requests.length, 2)
      assert.deepStrictEqual(
        delivered.map((e) => [e.message.to, bodyOf(e).session, bodyOf(e).job, bodyOf(e).kind, bodyOf(e).text]),
        [
          ["local", "cron:report", "report", "cron", "You said: status report"],
          ["local", "cron:report", "report", "cron", "You said: status report"]
        ]
      )
    }))

  it.effect("cron: the reply goes to the job's `to` when given", () =>
    Effect.gen(function*() {
      const { delivered, waitFor } = yield* harness(recording().service, {
        cron: [{ name: "daily", schedule: "0 9 * * *", prompt: "good morning", to: "team" }]
      })
      yield* TestClock.adjust(9 * 3_600_000 - 1)
      assert.deepStrictEqual(delivered, [])
      yield* TestClock.adjust(1)
      yield* waitFor(isDelivered)
      assert.deepStrictEqual([delivered[0]!.message.to, bodyOf(delivered[0]!).job], ["team", "daily"])
    }))

  it.effect("transcripts are bounded by historyLimit and persist across a restart", () =>
    Effect.gen(function*() {
      const stateDir = yield* tempDir
      const model = recording()
      yield* Effect.scoped(Effect.gen(function*() {
        const { agent } = yield* harness(model.service, { stateDir, historyLimit: 2 })
        for (const text of ["one", "two", "three"]) yield* Effect.flatMap(agent.send("s", text), (f) => f.await)
      }))
      const { agent } = yield* harness(model.service, { stateDir, historyLimit: 2 })
      yield* Effect.flatMap(agent.send("s", "four"), (f) => f.await)
      assert.deepStrictEqual(model.requests.at(-1)!.transcript.map((m) => `${m.role}:${m.content}`), [
        "user:two",
        "assistant:You said: two",
        "user:three",
        "assistant:You said: three",
        "user:four"
      ])
      const sessions = path.join(stateDir, "sessions")
      assert.strictEqual(fs.statSync(sessions).mode & 0o777, 0o700)
      for (const file of fs.readdirSync(sessions)) {
        assert.strictEqual(fs.statSync(path.join(sessions, file)).mode & 0o777, 0o600)
      }
    }))

  it.effect("messages accepted before a crash are answered on the next start", () =>
    Effect.gen(function*() {
      const stateDir = yield* tempDir
      const store = yield* Transcripts.make({ dir: path.join(stateDir, "sessions"), fsync: false })
      yield* store.accept("bob", ["m1", "m2"])
      const { delivered, events, waitFor } = yield* harness(recording().service, { stateDir })
      yield* waitFor(isDelivered)
      assert.deepStrictEqual(events.filter((e) => e.type === "recovered"), [{
        type: "recovered",
        session: "bob",
        messages: 2,
        replies: 0
      }])
      assert.deepStrictEqual([delivered[0]!.message.to, bodyOf(delivered[0]!).text, bodyOf(delivered[0]!).messages], [
        "bob",
        "You said: m1 / m2",
        2
      ])
      assert.deepStrictEqual((yield* store.load("bob")).pending, [])
    }))

  it.effect("a damaged session file does not keep the agent from starting; other sessions work", () =>
    Effect.gen(function*() {
      const stateDir = yield* tempDir
      fs.mkdirSync(path.join(stateDir, "sessions"), { recursive: true })
      fs.writeFileSync(
        path.join(stateDir, "sessions", "broken.json"),
        JSON.stringify({ session: "broken", turns: "?" })
      )
      const { agent } = yield* harness(recording().service, { stateDir })
      const result = yield* Effect.flatMap(agent.send("fine", "still here"), (f) => f.await)
      assert.strictEqual(result.text, "You said: still here")
    }))

  it.effect("a reply recorded before a crash is logged once: not again when it already reached the log", () =>
    Effect.gen(function*() {
      const stateDir = yield* tempDir
      const store = yield* Transcripts.make({ dir: path.join(stateDir, "sessions"), fsync: false })
      const [m] = yield* store.accept("carol", ["hello"])
      yield* store.record("carol", {
        kind: "user",
        answered: [m!.seq],
        user: ["hello"],
        reply: "You said: hello",
        to: "carol"
      })
      // The crash came after the append and before the transcript said so: the log holds it already.
      yield* Effect.scoped(Effect.gen(function*() {
        const log = yield* DeliveryLog.open({ dir: path.join(stateDir, "deliveries"), fsync: "never" })
        yield* log.append({
          channel: "test",
          to: "carol",
          body: { session: "carol", text: "You said: hello" },
          idempotencyKey: "reply:carol#1"
        })
      }))
      const { agent, delivered, waitFor } = yield* harness(recording().service, { stateDir })
      yield* waitFor(isDelivered)
      yield* agent.deliveries.idle
      assert.strictEqual(delivered.length, 1)
      assert.strictEqual((yield* store.load("carol")).unsent, undefined)
    }))

  it.effect("restartLane(main) fails the running turn stale; its accepted message is answered by a fresh turn at once", () =>
    Effect.gen(function*() {
      const model = gated()
      const { agent, delivered, waitFor } = yield* harness(model.service, { beforeClose: model.releaseAll })
      const first = yield* agent.send("s", "lost?")
      yield* model.calls(1)
      assert.strictEqual(yield* agent.restartLane("main"), 1)
      const failure = yield* Effect.flip(first.await)
      assert.deepStrictEqual([failure._tag, (failure as any).reason], ["QueueFailure", "stale"])
      yield* model.calls(2)
      assert.strictEqual(model.requests[1]!.transcript.at(-1)!.content, "lost?")
      const next = yield* agent.send("s", "again")
      yield* model.release(1)
      yield* model.calls(3)
      yield* model.release(2)
      const result = yield* next.await
      assert.deepStrictEqual([result.text, result.messages], ["You said: again", 1])
      yield* waitFor(isDelivered, 2)
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: lost?", "You said: again"])
    }))

  it.effect("shutdown drains the turn in flight, delivers its reply, then refuses new messages", () =>
    Effect.gen(function*() {
      const model = gated()
      const { agent, delivered } = yield* harness(model.service, { beforeClose: model.releaseAll })
      yield* agent.send("s", "finish me")
      yield* model.calls(1)
      const shutdown = yield* Effect.forkChild(agent.shutdown)
      yield* model.release(0)
      const report = yield* Fiber.join(shutdown)
      assert.deepStrictEqual(report, {
        drain: { completed: 1, canceled: 0, timedOut: false },
        pendingDeliveries: 0,
        unanswered: 0
      })
      assert.deepStrictEqual(delivered.map((e) => bodyOf(e).text), ["You said: finish me"])
      const refused = yield* Effect.flip(agent.send("s", "too late"))
      assert.strictEqual(refused._tag, "AdmissionError")
      assert.deepStrictEqual(yield* agent.shutdown, report)
    }))

  it.effect("bad options fail with AgentConfigInvalid naming the field", () =>
    Effect.gen(function*() {
      const cases: Array<[Partial<AgentOptions>, string]> = [
        [{ historyLimit: -1 }, "historyLimit"],
        [{ maxTokens: 0 }, "maxTokens"],
        [{ heartbeat: { everyMs: 0 } }, "heartbeat.everyMs"],
        [{ drainTimeoutMs: Number.NaN }, "drainTimeoutMs"],
        [{ cron: [{ name: "x", schedule: "nope", prompt: "p" }] }, "cron[0].schedule"],
        [{
          cron: [{ name: "x", schedule: "* * * * *", prompt: "p" }, { name: "x", schedule: "* * * * *", prompt: "p" }]
        }, "cron[1].name"]
      ]
      for (const [options, field] of cases) {
        const error = yield* Effect.flip(Effect.scoped(harness(recording().service, options)))
        assert.strictEqual((error as any)._tag, "AgentConfigInvalid")
        assert.strictEqual((error as any).field, field)
      }
    }))
})
