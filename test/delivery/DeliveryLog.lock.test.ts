/**
 * The single-writer lock under real faults: a holder SIGKILLed under a parent that never reaps (a
 * zombie), a LOCK naming a live unrelated process, live openers racing in child processes, a full
 * disk (a real tmpfs), a directory named LOCK, a directory that vanished before close.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import { dirname, join } from "node:path"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { DeliveryLog } from "../../src/delivery/index.js"
import { formatIdentity, isRunning, parseIdentity, selfIdentity } from "../../src/delivery/processIdentity.js"
import { nodeArgs } from "../support/node.js"
import { canMount, smallDisk } from "./faults/tmpfs.js"
import { failure, tempRoot, withWarnings } from "./fixtures/files.js"

const tmp = tempRoot("log-lock")
afterAll(tmp.rm)

const fixtures = join(dirname(fileURLToPath(import.meta.url)), "fixtures")
const boot = fs.readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim()
const lockOf = (dir: string) => parseIdentity(fs.readFileSync(join(dir, "LOCK"), "utf8"))
const procState = (pid: number): string | undefined => {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
    return s.slice(s.lastIndexOf(")") + 2).split(" ")[0]
  } catch {
    return undefined
  }
}
const startOf = (pid: number): string => {
  const s = fs.readFileSync(`/proc/${pid}/stat`, "utf8")
  return s.slice(s.lastIndexOf(")") + 2).split(" ")[19]!
}
/** Waits (yielding to the event loop, bounded) until `cond` holds. */
const until = async (cond: () => boolean, what: string) => {
  for (let i = 0; i < 2_000 && !cond(); i++) await new Promise((r) => setTimeout(r, 5))
  assert.isTrue(cond(), what)
}
const exited = (child: ChildProcess) =>
  new Promise<void>((
    resolve
  ) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.on("exit", () => resolve())))
const firstLine = (child: ChildProcess, text: string) =>
  new Promise<void>((resolve, reject) => {
    child.stdout!.setEncoding("utf8").on("data", (d: string) => d.includes(text) && resolve())
    child.on("exit", () => reject(new Error(`child exited before printing ${text}`)))
  })

/** Runs `use` on a fresh 64 KiB tmpfs (root only), unmounted afterwards whatever happens. */
const withDisk = <A, E, R>(use: (disk: ReturnType<typeof smallDisk>) => Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => smallDisk("log-lock-disk", "64k")),
    use,
    (disk) => Effect.sync(disk.unmount)
  )

describe("DeliveryLog lock", () => {
  it("the identity names this process by pid, start time and boot id, and reads back", () => {
    const me = selfIdentity()
    assert.deepStrictEqual(me, { pid: process.pid, start: startOf(process.pid), boot })
    assert.deepStrictEqual(parseIdentity(formatIdentity(me)), me)
    assert.isTrue(isRunning(me))
    assert.deepStrictEqual(parseIdentity("123\n"), { pid: 123 }, "the old format: a bare pid")
    assert.isUndefined(parseIdentity(""))
    assert.isUndefined(parseIdentity("12 x y"))
  })

  it.live("a holder SIGKILLed under a parent that never reaps is a zombie that kill(pid, 0) finds: its lock is taken over", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      // sh starts the holder in the background and blocks in `read`: it reaps nothing until `wait`.
      const sh = spawn("sh", [
        "-c",
        `${
          [process.execPath, ...nodeArgs(join(fixtures, "holdLock.ts")), dir].map((a) => `"${a}"`).join(" ")
        } & read line; wait`
      ], {
        stdio: ["pipe", "pipe", "inherit"]
      })
      try {
        yield* Effect.promise(() => firstLine(sh, "locked"))
        const holder = lockOf(dir)!.pid
        assert.notStrictEqual(holder, sh.pid)
        process.kill(holder, "SIGKILL")
        yield* Effect.promise(() => until(() => procState(holder) === "Z", "the killed holder is a zombie"))
        process.kill(holder, 0) // does not throw: the old pid check took the zombie for a live holder
        yield* withWarnings((warnings) =>
          Effect.scoped(
            Effect.gen(function*() {
              const log = yield* DeliveryLog.open({ dir, fsync: "never" })
              yield* log.append({ channel: "c", to: "a", body: 1 })
              assert.strictEqual(lockOf(dir)!.pid, process.pid)
              assert.isTrue(warnings.some((w) => w.includes(`left by process ${holder}`)), warnings.join("\n"))
            })
          )
        )
      } finally {
        sh.stdin!.end("done\n")
        yield* Effect.promise(() => exited(sh))
      }
    }))

  it.live("a LOCK naming a live unrelated process (pid 1, a sleep) with another start time, or from another boot, is taken over; with its own start time it is locked", () =>
    Effect.gen(function*() {
      const sleep = spawn("sleep", ["60"], { stdio: "ignore" })
      try {
        yield* Effect.promise(() => until(() => procState(sleep.pid!) !== undefined, "sleep runs"))
        const stale = [
          `1 ${Number(startOf(1)) + 12345} ${boot}\n`,
          `${sleep.pid} ${Number(startOf(sleep.pid!)) + 1} ${boot}\n`,
          `${sleep.pid} ${startOf(sleep.pid!)} 00000000-0000-0000-0000-000000000000\n`
        ]
        for (const text of stale) {
          const dir = tmp.next()
          fs.mkdirSync(dir)
          fs.writeFileSync(join(dir, "LOCK"), text)
          yield* Effect.scoped(DeliveryLog.open({ dir, fsync: "never" }))
          assert.isFalse(fs.existsSync(join(dir, "LOCK")), `taken over, then released: ${text}`)
        }
        // The old format (a bare pid): a process started after the lock was written did not write it.
        const old = tmp.next()
        fs.mkdirSync(old)
        fs.writeFileSync(join(old, "LOCK"), `${sleep.pid}\n`)
        fs.utimesSync(join(old, "LOCK"), new Date(2000, 0, 1), new Date(2000, 0, 1))
        yield* Effect.scoped(DeliveryLog.open({ dir: old, fsync: "never" }))
        // The real identity of a live process, in either format, holds.
        for (const text of [`${sleep.pid} ${startOf(sleep.pid!)} ${boot}\n`, `${sleep.pid}\n`]) {
          const dir = tmp.next()
          fs.mkdirSync(dir)
          fs.writeFileSync(join(dir, "LOCK"), text)
          const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never" })))
          assert.strictEqual(e.reason, "locked")
          assert.include(e.message, String(sleep.pid))
          assert.strictEqual(fs.readFileSync(join(dir, "LOCK"), "utf8"), text, "left as it was")
        }
      } finally {
        sleep.kill("SIGKILL")
        yield* Effect.promise(() => exited(sleep))
      }
    }))

  it.live(
    "live openers racing in 4 processes, 100 rounds (free, stale, old-format stale): exactly one wins each round",
    () =>
      Effect.gen(function*() {
        const children = Array.from({ length: 4 }, () =>
          spawn(process.execPath, nodeArgs(join(fixtures, "raceLock.ts")), {
            stdio: ["pipe", "pipe", "inherit"]
          }))
        const answers = new Map<string, Array<string>>()
        const waiting = new Map<string, () => void>()
        try {
          yield* Effect.promise(() =>
            Promise.all(children.map((c) =>
              firstLine(c, "ready")
            ))
          )
          children.forEach((c, i) =>
            createInterface({ input: c.stdout! }).on("line", (line) => {
              const at = line.lastIndexOf(" ")
              const dir = line.slice(0, at)
              const list = answers.get(dir) ?? []
              list.push(`${i}:${line.slice(at + 1)}`)
              answers.set(dir, list)
              if (list.length === children.length) {
                waiting.get(dir)?.()
              }
            })
          )
          const past = new Date(Date.now() - 60_000)
          for (let round = 0; round < 100; round++) {
            const dir = tmp.next()
            fs.mkdirSync(dir)
            if (round % 3 === 1) fs.writeFileSync(join(dir, "LOCK"), `${process.pid} 1 ${boot}\n`)
            if (round % 3 === 2) {
              fs.writeFileSync(join(dir, "LOCK"), "")
              fs.utimesSync(join(dir, "LOCK"), past, past)
            }
            const done = new Promise<void>((resolve) => waiting.set(dir, resolve))
            for (const c of children) c.stdin!.write(`${dir}\n`)
            yield* Effect.promise(() => done)
            const got = answers.get(dir)!
            const winners = got.filter((a) => a.endsWith(":Acquired"))
            assert.strictEqual(winners.length, 1, `round ${round}: ${got.join(", ")}`)
            assert.deepStrictEqual(
              got.filter((a) => !a.endsWith(":Acquired") && !a.endsWith(":Held")),
              [],
              `round ${round}`
            )
            const winner = children[Number(winners[0]!.split(":")[0])]!
            assert.strictEqual(lockOf(dir)!.pid, winner.pid, `round ${round}: the LOCK names the winner`)
            assert.deepStrictEqual(fs.readdirSync(dir), ["LOCK"], `round ${round}: no temporary or takeover file left`)
          }
        } finally {
          for (const c of children) c.stdin!.end()
          yield* Effect.promise(() => Promise.all(children.map(exited)))
        }
      }),
    60_000
  )

  it.effect("a directory named LOCK is an io error naming it, and nothing is renamed or removed", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      fs.mkdirSync(join(dir, "LOCK"), { recursive: true })
      fs.writeFileSync(join(dir, "LOCK", "inside"), "x")
      const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never" })))
      assert.strictEqual(e.reason, "io")
      assert.strictEqual(e.path, join(dir, "LOCK"))
      assert.include(e.message, "found a directory")
      assert.deepStrictEqual(fs.readdirSync(dir), ["LOCK"])
      assert.deepStrictEqual(fs.readdirSync(join(dir, "LOCK")), ["inside"])
    }))

  it.effect("closing a log whose directory was replaced (ENOTDIR) logs a warning instead of a defect", () =>
    withWarnings((warnings) =>
      Effect.gen(function*() {
        const dir = tmp.next()
        const scope = yield* Scope.make()
        const log = yield* Scope.provide(scope)(DeliveryLog.open({ dir, fsync: "never" }))
        yield* log.append({ channel: "c", to: "a", body: 1 })
        fs.renameSync(dir, `${dir}.moved`)
        fs.writeFileSync(dir, "not a directory")
        const exit = yield* Effect.exit(Scope.close(scope, Exit.void))
        assert.isTrue(Exit.isSuccess(exit), String(exit))
        const w = warnings.find((x) => x.includes("could not release the lock"))
        assert.isDefined(w, warnings.join("\n"))
        assert.include(w!, "ENOTDIR")
        assert.include(w!, join(dir, "LOCK"))
      })
    ))

  it.live.skipIf(!canMount)(
    "a full disk (a real 64 KiB tmpfs) while writing LOCK leaves no LOCK and no temporary file; once freed, open works",
    () =>
      withDisk((disk) =>
        Effect.gen(function*() {
          const dir = disk.dir
          fs.mkdirSync(dir)
          disk.fill(0)
          const e = yield* failure(Effect.scoped(DeliveryLog.open({ dir, fsync: "never" })))
          assert.strictEqual(e.reason, "io")
          assert.include(e.message, "ENOSPC")
          assert.strictEqual(e.path, join(dir, "LOCK"))
          assert.deepStrictEqual(fs.readdirSync(dir), [], "no empty LOCK, no temporary file")
          disk.free()
          yield* Effect.scoped(
            Effect.flatMap(
              DeliveryLog.open({ dir, fsync: "never" }),
              (log) => log.append({ channel: "c", to: "a", body: 1 })
            )
          )
        })
      )
  )

  it.live.skipIf(!canMount)(
    "a read-only mount names EROFS and the path, for a missing log directory and for the lock",
    () =>
      withDisk(({ mnt }) =>
        Effect.gen(function*() {
          fs.mkdirSync(join(mnt, "log"))
          execFileSync("mount", ["-o", "remount,ro", mnt])
          const missing = yield* failure(Effect.scoped(DeliveryLog.open({ dir: join(mnt, "a", "log") })))
          assert.strictEqual(missing.reason, "io")
          assert.include(missing.message, "EROFS")
          assert.notInclude(missing.message, "ENOENT")
          assert.strictEqual(missing.path, join(mnt, "a"))
          const lock = yield* failure(Effect.scoped(DeliveryLog.open({ dir: join(mnt, "log") })))
          assert.include(lock.message, "EROFS")
          assert.strictEqual(lock.path, join(mnt, "log", "LOCK"))
        })
      )
  )
})
