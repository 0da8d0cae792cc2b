/**
 * A runner's turn whose model stream stalls after its headers is cut by the runner's turn timeout
 * (`--turn-timeout`, default 5 minutes): its run fails `timeout` (a 502 to the waiting client), the
 * request is aborted, and the session's next message is answered. Without it the stalled turn held
 * its session's slot until the runner restarted (the SDK's own timeout ends at the headers). A real
 * runner process talking to the local fake Messages API over real HTTP; no test sleeps: the client
 * waits for the runner's answer, which comes when the runner's timeout fires.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as FakeAnthropic from "../support/fakeAnthropic.js"
import { freshDatabase, postgresAvailable } from "./pg.js"
import { postMessage, startRunner, terminate } from "./support.js"
import type { RunnerProcess } from "./support.js"

const up = await postgresAvailable("test/cluster/TurnTimeout.test.ts")

describe.skipIf(!up)("a runner's turn timeout", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  let fake: FakeAnthropic.FakeAnthropic | undefined
  let runner: RunnerProcess | undefined
  let dir: string | undefined
  beforeAll(async () => {
    db = await freshDatabase("turn_timeout")
    fake = await FakeAnthropic.start()
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-turn-timeout-"))
  }, 30_000)
  afterAll(async () => {
    if (runner?.alive) await terminate(runner)
    await fake?.close()
    await db?.drop()
    if (dir !== undefined) fs.rmSync(dir, { recursive: true, force: true })
  }, 30_000)

  it(
    "a stream stalled after its first chunk fails the run `timeout` (502) and aborts the request; the next message is answered",
    async () => {
      fake!.enqueue(FakeAnthropic.hang("Once upon "))
      runner = await startRunner({
        url: db!.url,
        outbox: path.join(dir!, "outbox.jsonl"),
        args: ["--turn-timeout", "1500"],
        env: { ANTHROPIC_API_KEY: "sk-ant-test-runner-timeout", ANTHROPIC_BASE_URL: fake!.url }
      })
      const cut = await postMessage(runner.port, "alice", "tell me a story", 60_000)
      expect(cut.status).toBe(502)
      expect(cut.body.reason).toBe("timeout")
      expect((await fake!.waitForAborts(1)).length).toBe(1)
      // the slot is free again: the session's next message gets the fake's default answer
      const answered = await postMessage(runner.port, "alice", "again", 60_000)
      expect(answered.status).toBe(200)
      expect(answered.body.reply?.text).toContain("Fake Claude heard:")
    },
    120_000
  )
})
