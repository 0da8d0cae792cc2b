/**
 * The durable "attempt started" mark and `entry.maybeSent`: in memory (order of log calls, a failing
 * mark, a log without one) and for real: a child process SIGKILLed mid-delivery over the file log,
 * restarted, its channel (a file outside the process) reconciling by `entry.id`.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Option } from "effect"
import { TestClock } from "effect/testing"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryEntry, DeliveryLog } from "../../src/delivery/types.js"
import { spawnReporting } from "./fixtures/reportLine.js"
import { makeMemoryLog } from "./memoryLog.js"

const msg = (to: string, body: unknown) => ({ channel: "test", to, body })

describe("DeliveryQueue attempt-started mark (memory log)", () => {
  it.effect("the mark is in the log before deliver is called; the outcome clears it", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const seenAtDeliver: Array<boolean | undefined> = []
      const q = yield* DeliveryQueue.make({
        log,
        deliver: (entry) =>
          Effect.map(log.get(entry.id), (now) => {
            seenAtDeliver.push(Option.getOrThrow(now).maybeSent)
          })
      })
      const hold = log.hold("markStarted")
      const e = yield* q.enqueue(msg("a", 1))
      yield* Deferred.await(hold.reached)
      assert.deepStrictEqual(seenAtDeliver, [], "deliver waits for the mark")
      yield* hold.release
      yield* q.idle
      assert.deepStrictEqual(seenAtDeliver, [true], "the log holds the mark when deliver runs")
      assert.deepStrictEqual(log.calls.map((c) => c.op), ["append", "markStarted", "ack"])
      assert.deepStrictEqual(log.acked, [e.id])
    }))

  it.effect("the next entry's mark is written alongside the ack ahead of it (one group commit), and not again before its attempt", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const q = yield* DeliveryQueue.make({ log, deliver: () => Effect.void })
      const hold = log.hold("ack")
      const first = yield* q.enqueue(msg("a", 1))
      const second = yield* q.enqueue(msg("a", 2))
      yield* Deferred.await(hold.reached)
      // The first ack is parked: the second entry's mark was issued at the same time, not after it.
      for (let i = 0; i < 100 && !log.calls.some((c) => c.op === "markStarted" && c.id === second.id); i++) {
        yield* Effect.yieldNow
      }
      const early = log.calls.map((c) => [c.op, "id" in c ? c.id : ""])
      yield* hold.release
      yield* q.idle
      assert.deepStrictEqual(early, [["append", first.id], ["append", second.id], ["markStarted", first.id], [
        "markStarted",
        second.id
      ]])
      const marks = log.calls.filter((c) => c.op === "markStarted").map((c) => "id" in c && c.id)
      assert.deepStrictEqual(marks, [first.id, second.id], "one mark each")
      assert.deepStrictEqual(log.acked, [first.id, second.id])
    }))

  it.effect("a replayed entry marked without an outcome reaches deliver with maybeSent; a fresh one without", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      const crashed = log.seed({ message: msg("a", "crashed"), enqueuedAt: 0, attempts: 0, maybeSent: true })
      const fresh = log.seed({ message: msg("b", "fresh"), enqueuedAt: 0, attempts: 0 })
      const seen = new Map<string, boolean | undefined>()
      const q = yield* DeliveryQueue.make({
        log,
        deliver: (entry: DeliveryEntry) => Effect.sync(() => void seen.set(entry.id, entry.maybeSent))
      })
      yield* q.idle
      assert.deepStrictEqual([...seen], [[crashed.id, true], [fresh.id, undefined]])
      assert.deepStrictEqual(log.acked, [crashed.id, fresh.id])
    }))

  it.effect("a failing mark: deliver is not called, no attempt counted, the mark is retried after 1 s", () =>
    Effect.gen(function*() {
      const log = makeMemoryLog()
      let delivered = 0
      const q = yield* DeliveryQueue.make({ log, deliver: () => Effect.sync(() => void delivered++) })
      log.failNext("markStarted", 1)
      const e = yield* q.enqueue(msg("a", 1))
      yield* q.idle
      assert.strictEqual(delivered, 0)
      assert.strictEqual(Option.getOrThrow(yield* log.get(e.id)).attempts, 0)
      yield* TestClock.adjust(999)
      yield* q.idle
      assert.strictEqual(delivered, 0)
      yield* TestClock.adjust(1)
      yield* q.idle
      assert.strictEqual(delivered, 1)
      assert.deepStrictEqual(log.calls.map((c) => [c.op, c.failed]), [["append", false], ["markStarted", true], [
        "markStarted",
        false
      ], ["ack", false]])
    }))

  it.effect("a log without markStarted delivers as before", () =>
    Effect.gen(function*() {
      const { markStarted: _m, ...rest } = makeMemoryLog()
      const log: DeliveryLog = rest
      const q = yield* DeliveryQueue.make({ log, deliver: () => Effect.void })
      yield* q.enqueue(msg("a", 1))
      yield* q.idle
      assert.deepStrictEqual(yield* q.stats, { pending: 0, dead: 0, inFlight: 0, delivered: 1 })
    }))
})

// ---- real crashes ----

const child = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "reconcileChild.ts")
const root = mkdtempSync(join(tmpdir(), "switchyard-maybe-sent-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))

interface Run {
  readonly lines: Array<string>
  readonly killed: boolean
}

/** Runs the child; SIGKILLs it as soon as it reports `HANG` (it hangs inside deliver). */
const run = (dir: string, remote: string, hang: string, reconcile: boolean, enqueue: boolean) =>
  new Promise<Run>((resolve, reject) => {
    const lines: Array<string> = []
    const { child: proc, stderr } = spawnReporting(
      [child, dir, remote, hang, reconcile ? "1" : "0", enqueue ? "1" : "0"],
      (line) => {
        lines.push(line)
        if (line.startsWith("HANG")) proc.kill("SIGKILL")
      }
    )
    proc.on("error", reject)
    // "close", not "exit": at "exit" the last lines may still be unread.
    proc.on("close", (code, signal) => {
      if (signal === "SIGKILL" || code === 0) resolve({ lines, killed: signal === "SIGKILL" })
      else reject(new Error(`child exited ${code}: ${stderr()}`))
    })
  })

const ids = (lines: ReadonlyArray<string>, kind: string) =>
  lines.filter((l) => l.startsWith(`${kind} `)).map((l) => l.split(" ")[1]!)

/** Round 0 enqueues and is killed inside the 3rd send (`before` or `after` it reached the remote); round 1 replays. */
const crashAndRestart = async (name: string, where: "before" | "after", reconcile: boolean) => {
  const dir = join(root, name)
  const remote = join(root, `${name}.remote`)
  const first = await run(dir, remote, `${where}:3`, reconcile, true)
  assert.isTrue(first.killed, "killed inside deliver")
  const hung = ids(first.lines, "HANG")[0]!
  const second = await run(dir, remote, "none", reconcile, false)
  assert.isFalse(second.killed)
  assert.include(second.lines, "done 0 0")
  const sent = existsSync(remote) ? readFileSync(remote, "utf8").split("\n").filter((l) => l.length > 0) : []
  return { first, second, hung, sent }
}

describe("DeliveryQueue maybeSent after a real SIGKILL (file log)", () => {
  it(
    "killed after the send reached the remote: the replayed entry is maybeSent, reconciled, not sent twice",
    async () => {
      const { first, second, hung, sent } = await crashAndRestart("after", "after", true)
      assert.include(ids(first.lines, "S"), hung, "it was sent before the kill")
      assert.include(second.lines, `A ${hung} 1`, "replayed with maybeSent")
      assert.include(ids(second.lines, "R"), hung, "reconciled")
      assert.notInclude(ids(second.lines, "S"), hung)
      assert.strictEqual(new Set(sent).size, sent.length, `no id sent twice: ${sent.join(", ")}`)
      for (const id of ids(first.lines, "E")) assert.include(sent, id, "every enqueued entry reached the remote")
      // Entries acked before the kill are not replayed; only ones in flight at the kill come back maybeSent.
      const acked = ids(first.lines, "S").filter((id) => id !== hung)
      for (const line of second.lines.filter((l) => l.startsWith("A ") && l.endsWith(" 0"))) {
        assert.notInclude(acked, line.split(" ")[1], "an entry that was not in flight is not maybeSent")
      }
    },
    60_000
  )

  it("killed after the mark but before the send: maybeSent, not in the remote, sent once", async () => {
    const { first, second, hung, sent } = await crashAndRestart("before", "before", true)
    assert.notInclude(ids(first.lines, "S"), hung)
    assert.include(second.lines, `A ${hung} 1`)
    assert.include(ids(second.lines, "S"), hung, "looked up, not found, sent")
    assert.strictEqual(sent.filter((id) => id === hung).length, 1)
    assert.strictEqual(new Set(sent).size, sent.length)
  }, 60_000)

  it("without reconciling, the same crash sends the entry twice (what maybeSent is for)", async () => {
    const { hung, sent, second } = await crashAndRestart("blind", "after", false)
    assert.include(second.lines, `A ${hung} 1`)
    assert.strictEqual(sent.filter((id) => id === hung).length, 2)
  }, 60_000)
})
