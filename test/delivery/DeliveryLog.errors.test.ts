/**
 * Error texts name the real cause and the file: a file where the log directory should be (EEXIST,
 * ENOTDIR), a segment the process may not read (EACCES, run as the unprivileged user `nobody`: root
 * reads everything).
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { DeliveryLog } from "../../src/delivery/index.js"
import { nodeArgs } from "../support/node.js"
import { canMount } from "./faults/tmpfs.js"
import { failure, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-errors")
afterAll(tmp.rm)

const fixture = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "openOnce.ts")
const hasRunuser = fs.existsSync("/usr/sbin/runuser") || fs.existsSync("/sbin/runuser")

describe("DeliveryLog error texts", () => {
  it.effect("a file where the log directory (or a parent) should be fails io naming EEXIST / ENOTDIR and that path", () =>
    Effect.gen(function*() {
      const file = tmp.next()
      fs.writeFileSync(file, "not a directory")
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir: file })))
      assert.strictEqual(e.reason, "io")
      assert.include(e.message, `EEXIST (it already exists) at ${file}`)
      assert.strictEqual(e.path, file)
      const under = yield* failure(Effect.scoped(DeliveryLog.open({ dir: join(file, "log") })))
      assert.include(under.message, "ENOTDIR")
      assert.strictEqual(under.path, join(file, "log"))
      assert.strictEqual(fs.readFileSync(file, "utf8"), "not a directory")
    }))

  it.effect.skipIf(!canMount || !hasRunuser)(
    "a segment the process may not read fails io naming EACCES and that segment",
    () =>
      Effect.gen(function*() {
        const dir = tmp.next()
        yield* Effect.scoped(Effect.flatMap(DeliveryLog.open({ dir, fsync: "never" }), (log) =>
          log.append({ channel: "c", to: "a", body: 1 })))
        const segment = fs.readdirSync(dir).find((f) =>
          f.endsWith(".log")
        )!
        fs.chmodSync(tmp.root, 0o755)
        for (const f of fs.readdirSync(dir)) {
          if (f !== segment) {
            fs.chownSync(join(dir, f), 65534, 65534)
          }
        }
        fs.chownSync(dir, 65534, 65534)
        const out = execFileSync("runuser", ["-u", "nobody", "--", process.execPath, ...nodeArgs(fixture), dir], {
          encoding: "utf8"
        })
        const [reason, path, message] = out.trim().split(" | ")
        assert.strictEqual(reason, "io", out)
        assert.strictEqual(path, join(dir, segment))
        assert.include(message, "EACCES")
        assert.include(message, segment)
      })
  )
})
