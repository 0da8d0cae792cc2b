/**
 * Fault: the disk of the delivery log fills up (a real 1 MiB tmpfs), then is freed. The log fails
 * the writes it cannot make with `io` (ENOSPC), says so in `health`, fails fast while failing, shows
 * exactly what a re-open shows, and heals itself: no restart, nothing lost, nothing duplicated.
 */
import { afterEach, assert, describe, it } from "@effect/vitest"
import { Effect, Result } from "effect"
import { DeliveryLog, type DeliveryLogError } from "../../../src/delivery/index.js"
import { canMount, smallDisk, untilHealthy } from "./tmpfs.js"

const body = "x".repeat(3000)
const msg = (i: number) => ({ channel: "c", to: `r${i % 3}`, body: { i, body } })

let disk: ReturnType<typeof smallDisk> | undefined
afterEach(() => {
  disk?.unmount()
  disk = undefined
})

describe.skipIf(!canMount)("fault: a full disk (real tmpfs, needs root)", () => {
  it.live(
    "appends fail io ENOSPC, health says failing, reads match a re-open; freed, the log heals and loses nothing",
    () =>
      Effect.gen(function*() {
        disk = smallDisk("fault-full", "1m")
        const d = disk
        const kept: Array<string> = []
        const acked: Array<string> = []
        yield* Effect.scoped(
          Effect.gen(function*() {
            const log = yield* DeliveryLog.open({ dir: d.dir, segmentBytes: 64 * 1024 })
            d.fill(40 * 1024)
            let error: unknown
            for (let i = 0; i < 1000 && error === undefined; i++) {
              const r = yield* Effect.result(log.append(msg(i)))
              if (Result.isFailure(r)) error = r.failure
              else if (i % 4 === 0) {
                const a = yield* Effect.result(log.ack(r.success.id))
                if (Result.isFailure(a)) {
                  error = a.failure
                  kept.push(r.success.id) // a failed ack leaves the entry pending
                } else acked.push(r.success.id)
              } else kept.push(r.success.id)
            }
            assert.isDefined(error, "the disk filled")
            const e = error as DeliveryLogError
            assert.strictEqual(e._tag, "DeliveryLogError")
            assert.strictEqual(e.reason, "io")
            assert.include(e.message, "ENOSPC")
            const h = yield* log.health
            assert.strictEqual(h.status, "failing")
            if (h.status !== "failing") return
            assert.strictEqual(h.error.reason, "io")
            // Fails fast while failing, with the last io error.
            const fast = yield* Effect.result(log.append(msg(-1)))
            assert.isTrue(Result.isFailure(fast) && fast.failure.reason === "io")
            // Reads show what is durable: exactly the acknowledged appends minus the acknowledged acks.
            const pending = (yield* log.pending).map((x) => x.id)
            assert.deepStrictEqual(pending, kept)
            assert.strictEqual((yield* log.stats).pending, kept.length)
            for (const id of acked) assert.isTrue((yield* log.get(id))._tag === "None")

            d.free()
            const took = yield* untilHealthy(log, 10_000)
            assert.isAtLeast(took, 0)
            const more = yield* log.append(msg(2000))
            kept.push(more.id)
            assert.deepStrictEqual((yield* log.pending).map((x) => x.id), kept)
          })
        )
        // A re-open shows the same: nothing lost, nothing duplicated, nothing acked back.
        const after = yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir: d.dir }), (l) => l.pending))
        assert.deepStrictEqual(after.map((x) => x.id), kept)
      }),
    30_000
  )
})
