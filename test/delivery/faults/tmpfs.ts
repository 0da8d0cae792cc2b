/** Helpers of the fault suite. A real small disk for fault tests: a tmpfs mounted for the test (needs root), unmounted after. */
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import { join } from "node:path"
import type { DeliveryLog as Log } from "../../../src/delivery/types.js"
import { tempRoot } from "../fixtures/files.js"

/** True when this process may mount (root on Linux). Fault tests that need a real full disk skip otherwise, and say so. */
export const canMount = process.platform === "linux" && process.getuid?.() === 0

/** Mount a tmpfs of `size` (e.g. "1m") on a fresh directory; `fill` leaves about `freeBytes` free; `unmount` undoes it. */
export const smallDisk = (name: string, size: string) => {
  const tmp = tempRoot(name)
  const mnt = join(tmp.root, "mnt")
  fs.mkdirSync(mnt)
  execFileSync("mount", ["-t", "tmpfs", "-o", `size=${size},mode=0700`, "tmpfs", mnt])
  const filler = join(mnt, "filler")
  return {
    mnt,
    dir: join(mnt, "log"),
    /** Write a filler file until the disk is full, then give back `freeBytes` of it. */
    fill: (freeBytes: number): void => {
      const fd = fs.openSync(filler, "w")
      const chunk = Buffer.alloc(4096, 1)
      let size = 0
      try {
        for (;;) {
          fs.writeSync(fd, chunk)
          size += chunk.length
        }
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOSPC") throw e
      }
      fs.ftruncateSync(fd, Math.max(0, size - freeBytes))
      fs.closeSync(fd)
    },
    /** Remove the filler: the disk has room again. */
    free: (): void => fs.rmSync(filler, { force: true }),
    unmount: (): void => {
      try {
        try {
          execFileSync("umount", [mnt], { stdio: "ignore" })
        } catch {
          // Busy (a failed test left a file open): detach it now, the kernel frees it once closed.
          execFileSync("umount", ["-l", mnt])
        }
      } finally {
        tmp.rm()
      }
    }
  }
}

/** Polls `health` (real time: the log's backoff is real) until it is ok, for at most `ms`. */
export const untilHealthy = (log: Log, ms: number) =>
  Effect.gen(function*() {
    const start = Date.now()
    for (;;) {
      const h = yield* log.health
      if (h.status === "ok") return Date.now() - start
      if (Date.now() - start > ms) return assert.fail(`the log did not heal within ${ms} ms: ${h.error.message}`)
      yield* Effect.promise(() => new Promise((r) => setTimeout(r, 20)))
    }
  })
