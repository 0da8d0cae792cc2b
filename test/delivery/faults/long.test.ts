/**
 * The long part of the fault suite (`npm run faults`; skipped by `npm test`): a real child process
 * writing on a disk that fills, then SIGKILLed; and a delivery queue that carries on by itself once
 * the full disk is freed. Both on a real tmpfs (root).
 */
import { afterEach, assert, describe, it } from "@effect/vitest"
import { Effect, Result } from "effect"
import { DeliveryLog, DeliveryQueue } from "../../../src/delivery/index.js"
import { check, Model, runRound } from "../fixtures/crashHarness.js"
import { canMount, smallDisk, untilHealthy } from "./tmpfs.js"

const long = process.env.SWITCHYARD_FAULTS_LONG === "1"

let disk: ReturnType<typeof smallDisk> | undefined
afterEach(() => {
  disk?.unmount()
  disk = undefined
})

describe.runIf(long && canMount)("fault suite, long part (real tmpfs, real SIGKILL)", () => {
  it.live(
    "a child writing until the disk is full fails io ENOSPC; freed, a SIGKILLed second round; nothing lost or duplicated",
    () =>
      Effect.promise(async () => {
        disk = smallDisk("fault-long-child", "4m")
        const d = disk
        const model = new Model()
        // Round 0 makes the directory; then the disk is filled to within 300 KB.
        await runRound(d.dir, 0, model, 50)
        d.fill(300 * 1024)
        const full = await runRound(d.dir, 1, model, 1_000_000)
        assert.strictEqual(full.code, 1, "the child stopped on its own: its append failed")
        assert.include(full.stderr, "ENOSPC")
        assert.include(full.stderr, "DeliveryLogError")
        d.free()
        const afterFull = await check(d.dir, model).catch((e) => assert.fail(`after the full round: ${e}`))
        assert.isAbove(afterFull.pending, 0)
        const killed = await runRound(d.dir, 2, model, 400)
        assert.strictEqual(killed.signal, "SIGKILL")
        await check(d.dir, model).catch((e) => assert.fail(`after the SIGKILLed round: ${e}`))
      }),
    120_000
  )

  it.live(
    "a delivery queue on a disk that fills: acks fail, then the log heals and the queue finishes without a restart",
    () =>
      Effect.gen(function*() {
        disk = smallDisk("fault-long-queue", "1m")
        const d = disk
        const delivered = new Map<string, number>()
        const appended: Array<string> = []
        yield* Effect.scoped(
          Effect.gen(function*() {
            const log = yield* DeliveryLog.open({ dir: d.dir, segmentBytes: 64 * 1024 })
            const q = yield* DeliveryQueue.make({
              log,
              deliver: (e) => Effect.sync(() => void delivered.set(e.id, (delivered.get(e.id) ?? 0) + 1))
            })
            d.fill(30 * 1024)
            for (let i = 0; i < 400; i++) {
              const r = yield* Effect.result(
                q.enqueue({ channel: "c", to: `r${i % 4}`, body: { i, pad: "x".repeat(500) } })
              )
              if (Result.isFailure(r)) {
                assert.strictEqual(r.failure.reason, "io")
                break
              }
              appended.push(r.success.id)
            }
            assert.strictEqual((yield* log.health).status, "failing", "the disk filled")
            d.free()
            yield* untilHealthy(log, 10_000)
            // The queue retries the acks it owes (1 s, then 5 s) by itself: wait until the log holds nothing.
            const start = Date.now()
            while ((yield* log.stats).pending > 0) {
              if (Date.now() - start > 40_000) assert.fail(`still ${(yield* log.stats).pending} pending after 40 s`)
              yield* Effect.promise(() => new Promise((r) => setTimeout(r, 100)))
            }
            yield* q.idle
          })
        )
        for (const id of appended) assert.strictEqual(delivered.get(id), 1, `entry ${id} delivered exactly once`)
        const left = yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir: d.dir }), (l) => l.pending))
        assert.deepStrictEqual(left, [], "nothing pending after a re-open: every ack reached the disk")
      }),
    90_000
  )
})
