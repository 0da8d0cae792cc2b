/**
 * Fault: compaction cannot write its snapshot (a directory sits at every `<n>.snap.tmp` name it could
 * use, so opening the temp file fails EISDIR) while segments roll as usual. The writes go on;
 * compaction backs off instead of retrying with every write batch, and a retry never seals another
 * segment. Once the block is removed, compaction succeeds by itself.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import { join } from "node:path"
import { DeliveryLog } from "../../../src/delivery/index.js"
import { tempRoot } from "../fixtures/files.js"

const tmp = tempRoot("fault-compaction")
afterAll(tmp.rm)

const BLOCKED = 3000
const tmpName = (n: number) => `${String(n).padStart(16, "0")}.snap.tmp`
const block = (dir: string) => {
  for (let n = 1; n <= BLOCKED; n++) fs.mkdirSync(join(dir, tmpName(n)))
}
const unblock = (dir: string) => {
  for (let n = 1; n <= BLOCKED; n++) fs.rmSync(join(dir, tmpName(n)), { recursive: true, force: true })
}

const files = (dir: string, ext: string) => fs.readdirSync(dir).filter((f) => f.endsWith(ext))

describe("fault: compaction blocked (a directory at every snapshot temp name)", () => {
  it.live(
    "2,000 append+ack with compaction blocked: no storm of segments; unblocked, it compacts by itself",
    () =>
      Effect.gen(function*() {
        const dir = tmp.next()
        const segmentBytes = 4096
        yield* Effect.scoped(
          Effect.gen(function*() {
            const log = yield* DeliveryLog.open({ dir, fsync: "never", segmentBytes })
            const keep = yield* log.append({ channel: "c", to: "keep", body: "keep" })
            block(dir)
            try {
              for (let i = 0; i < 2000; i++) {
                const e = yield* log.append({ channel: "c", to: `r${i % 5}`, body: { i } })
                yield* log.ack(e.id)
              }
              const stats = yield* log.stats
              const logs = files(dir, ".log").length
              // Without compaction the records alone fill ceil(bytes / segmentBytes) segments; each try
              // that seals one adds at most one. Before the fix: 1,681 segment files.
              const natural = Math.ceil(stats.bytes / segmentBytes)
              assert.isAtMost(logs, natural + 3, `${logs} segment files for ${stats.bytes} bytes`)
              assert.strictEqual(files(dir, ".snap").length, 0, "the block held: no snapshot")
              assert.strictEqual((yield* log.health).status, "ok", "a failed compaction does not fail the log")
            } finally {
              unblock(dir)
            }
            // Unblocked: compaction succeeds by itself once its backoff passed (polled, bounded).
            const start = Date.now()
            let i = 0
            while (files(dir, ".snap").length === 0) {
              if (Date.now() - start > 15_000) assert.fail("compaction did not succeed by itself within 15 s")
              const e = yield* log.append({ channel: "c", to: "r", body: { again: i++ } })
              yield* log.ack(e.id)
              yield* Effect.promise(() => new Promise((r) => setTimeout(r, 5)))
            }
            assert.deepStrictEqual((yield* log.pending).map((e) => e.id), [keep.id])
          })
        )
        const pending = yield* Effect.scoped(
          Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (l) => l.pending)
        )
        assert.deepStrictEqual(pending.map((e) => e.message.to), ["keep"])
      }),
    30_000
  )
})
