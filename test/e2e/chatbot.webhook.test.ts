/**
 * `npm run chat -- --webhook <url>` against a local HTTP server the test starts: a reply is POSTed
 * with its delivery id as Idempotency-Key before it is printed; a reply the webhook refused with 503
 * stays in the log and the next start delivers it (same id); a URL that is not http(s) is one line
 * and exit 1, with nothing written.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { runChatbot, startChatbot, useTempDirs } from "../support/chatbot.js"
import { answer, startServer } from "../support/httpServer.js"

const fresh = useTempDirs()

describe("chatbot --webhook", () => {
  it("POSTs each reply as { id, channel, to, body } with Idempotency-Key: <id>, then prints it", async () => {
    const server = await startServer((_req, res) => answer(res, 200))
    try {
      const stateDir = path.join(fresh(), "state")
      const { exit, bot } = await runChatbot(
        ["--state-dir", stateDir, "--json", "--latency", "0", "--webhook", `${server.url}/hook`],
        "hello\n"
      )
      expect(exit.code).toBe(0)
      const replies = bot.events.filter((e) => e.type === "reply")
      expect(replies).toHaveLength(1)
      expect(server.requests).toHaveLength(1)
      const [request] = server.requests
      expect(request.path).toBe("/hook")
      expect(request.headers["idempotency-key"]).toBe(replies[0]!.id)
      expect(JSON.parse(request.body)).toEqual({
        id: replies[0]!.id,
        channel: "console",
        to: "local",
        body: { session: "local", kind: "user", text: "You said: hello", messages: 1, turn: 1 }
      })
    } finally {
      await server.close()
    }
  })

  it("a 503 leaves the reply in the log with one line saying so; the next start delivers it with the same Idempotency-Key", async () => {
    let up = false
    const server = await startServer((
      _req,
      res
    ) => (up ? answer(res, 200) : answer(res, 503, { error: "down" }, { "retry-after": "1" })))
    try {
      const stateDir = path.join(fresh(), "state")
      const args = ["--state-dir", stateDir, "--json", "--latency", "0", "--webhook", server.url]
      const first = await runChatbot(args, "hello\n")
      expect(first.exit.code).toBe(0)
      const failed = first.bot.stderr.filter((l) => l.includes("was not delivered"))
      expect(failed).toHaveLength(1)
      expect(failed[0]).toMatch(
        /answered 503 Service Unavailable \(Retry-After: 1\): \{"error":"down"\}; it stays in the delivery log/
      )
      expect(first.bot.events.filter((e) => e.type === "reply")).toEqual([])
      expect(first.bot.events.at(-1)).toMatchObject({ type: "shutdown", pendingDeliveries: 1 })

      up = true
      const second = startChatbot(args)
      try {
        // Replay: the entry is due once its Retry-After (at least the queue's floor) has passed.
        const reply = await second.waitForEvent((e) => e.type === "reply", "the replayed reply")
        expect(reply).toMatchObject({ session: "local", text: "You said: hello" })
        second.end()
        expect((await second.waitForExit()).code).toBe(0)
        const keys = server.requests.map((r) => r.headers["idempotency-key"])
        expect(keys).toEqual([reply.id, reply.id])
      } finally {
        second.kill("SIGKILL")
      }
    } finally {
      await server.close()
    }
  })

  it.each([
    ["ftp://example.com/hook", "ftp://example.com/hook"],
    ["example.com/hook", "example.com/hook"],
    ["ftp://me:s3cret@example.com/x?token=t0k", "ftp://me:***@example.com/x?..."]
  ])("--webhook %s: one line naming the flag, exit 1, nothing written, no secret repeated", async (url, shown) => {
    const dir = fresh()
    const { exit, bot } = await runChatbot(["--state-dir", path.join(dir, "state"), "--webhook", url], "hello\n")
    expect(exit.code).toBe(1)
    expect(bot.stderr.filter((l) => l !== "")).toEqual([
      `error: option '--webhook <url>' argument '${shown}' is invalid. Expected \`--webhook\` to be an http or https URL, got \`${shown}\``
    ])
    expect(bot.stdout.filter((l) => l !== "")).toEqual([])
    expect(fs.readdirSync(dir)).toEqual([])
  })
})
