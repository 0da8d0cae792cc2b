/**
 * The runner's HTTP ingress: messages, replies, errors in their status codes, /status, /metrics,
 * /healthz, and this runner's lane controls (GET /lanes, pause, resume, PUT limits).
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import * as fs from "node:fs"
import * as http from "node:http"
import { afterAll, beforeAll } from "vitest"
import * as Postgres from "../../src/cluster/Postgres.js"
import * as Runner from "../../src/cluster/Runner.js"
import { nodeArgs } from "../support/node.js"
import { freshDatabase, postgresAvailable } from "./pg.js"
import { parsePrometheus } from "./prometheus.js"
import { freePort } from "./support.js"

const up = await postgresAvailable("test/cluster/Ingress.test.ts")

describe.skipIf(!up)("Ingress (Postgres)", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  let port = 0
  let clusterPort = 0
  beforeAll(async () => {
    db = await freshDatabase("ingress")
    port = await freePort()
    clusterPort = await freePort()
  }, 30_000)
  afterAll(async () => {
    await db?.drop()
  })

  /**
   * Opens the runners' hop (`GET <path>` with `upgrade: switchyard-hop/1`), writes `writes` one after another
   * and collects answer lines until one per request line came (or 10 s passed); a refused upgrade: its status.
   */
  const hop = (path: string, headers: Record<string, string>, writes: ReadonlyArray<string>) =>
    new Promise<{ status: number; lines: Array<string> }>((resolve, reject) => {
      const req = http.request({
        host: "127.0.0.1",
        port,
        path,
        method: "GET",
        agent: false,
        headers: { ...headers, connection: "Upgrade", upgrade: "switchyard-hop/1" }
      })
      req.on("response", (res) => {
        res.resume()
        resolve({ status: res.statusCode ?? 0, lines: [] })
      })
      req.on("upgrade", (res, socket, head) => {
        const expected = writes.join("").split("\n").length - 1
        let text = head.toString("utf8")
        const lines = () => text.split("\n").slice(0, -1)
        const timer = setTimeout(() => done(), 10_000)
        const done = () => {
          clearTimeout(timer)
          socket.destroy()
          resolve({ status: res.statusCode ?? 0, lines: lines() })
        }
        socket.on("data", (c: Buffer) => {
          text += c.toString("utf8")
          if (lines().length >= expected) done()
        })
        for (const w of writes) socket.write(w)
      })
      req.on("error", reject)
      req.end()
    })
  const call = (method: string, path: string, body?: string, headers: Record<string, string> = {}) =>
    Effect.promise(async () => {
      const res = await fetch(`http://127.0.0.1:${port}${path}`, {
        method,
        headers,
        ...(body === undefined ? {} : { body })
      })
      const text = await res.text()
      return {
        status: res.status,
        headers: res.headers,
        text,
        json: (() => {
          try {
            return JSON.parse(text)
          } catch {
            return undefined
          }
        })()
      }
    })

  it.live(
    "POST /sessions/:id/messages: 202 once durable, 200 with the reply under ?wait, the same id joins the first run; bad bodies, a `wait` that is not whole milliseconds up to 60 s, reserved (heartbeat, cron:*) or malformed session names get 400 and reach no turn; unknown routes 404",
    () =>
      Effect.scoped(Effect.gen(function*() {
        yield* Runner.start({ postgres: db!.url, port, clusterPort, latencyMs: 0, shardsPerGroup: 8, name: "ingress" })
        const accepted = yield* call("POST", "/sessions/bob/messages", JSON.stringify({ text: "hi", id: "m1" }))
        assert.strictEqual(accepted.status, 202)
        assert.deepStrictEqual(accepted.json, { runId: accepted.json.runId, session: "bob", runner: "ingress" })
        assert.match(accepted.json.runId, /^coalesce:main:bob:\d+$/)
        const again = yield* call("POST", "/sessions/bob/messages?wait=10000", JSON.stringify({ text: "hi", id: "m1" }))
        assert.strictEqual(again.status, 200)
        // Both are JSON as the API declares them (the handler writes them itself, without the Schema encode).
        assert.deepStrictEqual(
          [accepted.headers.get("content-type"), again.headers.get("content-type")],
          ["application/json", "application/json"]
        )
        assert.strictEqual(again.json.runId, accepted.json.runId)
        assert.strictEqual(again.json.reply.text, "You said: hi")
        // The reply's fields say what they are: the runner whose turn committed, the id of its outbox entry.
        const [entry] = yield* Postgres.withClient(db!.url, (sql) =>
          sql.unsafe<{ id: string }>(`SELECT id FROM switchyard_outbox WHERE idempotency_key = $1`, [
            `reply:${accepted.json.runId}`
          ]))
        assert.deepStrictEqual(
          [again.json.reply.turnRunner, again.json.reply.deliveryId, again.json.reply.messages],
          ["ingress", entry.id, 1]
        )
        const ok = JSON.stringify({ text: "x" })
        const statuses = yield* Effect.all([
          call("POST", "/sessions/bob/messages", "not json"),
          call("POST", "/sessions/bob/messages", JSON.stringify({ nope: 1 })),
          call("POST", "/sessions/bob/messages", JSON.stringify({ text: "x", id: 7 })),
          call("POST", "/sessions/bob/messages", JSON.stringify({ text: "x", bogus: 1 })),
          call("POST", "/sessions/bob/messages?wait=abc", ok),
          call("POST", "/sessions/bob/messages?wait=-5", ok),
          call("POST", "/sessions/bob/messages?wait=", ok),
          call("POST", "/sessions/bob/messages?wait=60001", ok),
          call("POST", "/sessions/heartbeat/messages", ok),
          call("POST", "/sessions/cron%3Areport/messages", ok),
          call("POST", "/sessions/%E0%A4%A/messages", ok),
          call("POST", "/lanes/nope/restart"),
          call("GET", "/nowhere")
        ])
        // Every one is a 400 but the unknown route.
        assert.deepStrictEqual(
          statuses.map((s) =>
            s.status
          ),
          [...statuses.slice(1).map(() => 400), 404]
        )
        for (const s of statuses) assert.isString(s.json.error)
        // A key the body does not have is refused by name, not dropped (the message is not sent).
        assert.include(statuses[3].json.error, "Expected no excess property at [\"bogus\"]")
        assert.strictEqual(
          statuses[4].json.error,
          "Expected `wait` to be an integer of milliseconds from 0 to 60000, got `abc`"
        )
        assert.deepStrictEqual([statuses[8].json.reason, statuses[9].json.reason], ["reserved", "reserved"])
        // A body over 64 KiB is 413 too-large (valid JSON, so not a parse error); another method on a
        // session path is an unknown route, not a malformed session name.
        const big = JSON.stringify({ text: "a".repeat(70_000) })
        const refused = yield* Effect.all([
          call("POST", "/sessions/bob/messages", big),
          call("PUT", "/lanes/main/limits", big),
          call("GET", "/sessions/bob/messages"),
          call("PUT", "/sessions/bob/cancel")
        ])
        assert.deepStrictEqual(refused.map((r) => [r.status, r.json._tag, r.json.reason]), [
          [413, "TooLarge", "too-large"],
          [413, "TooLarge", "too-large"],
          [404, "NotFound", "not-found"],
          [404, "NotFound", "not-found"]
        ])
        // None of the refused messages reached the cluster: only the two accepted above were dispatched.
        const counters = (yield* call("GET", "/status")).json.counters
        assert.strictEqual(counters.dispatched, 2)
      })),
    60_000
  )

  it.live(
    "lane controls of this runner: POST /lanes/:lane/pause holds a message (waiting, running 0), PUT /lanes/:lane/limits sets concurrent and queued, POST /lanes/:lane/resume answers it; GET /lanes shows each; unknown lanes and bad limits get 400 and change nothing",
    () =>
      Effect.scoped(Effect.gen(function*() {
        yield* Runner.start({ postgres: db!.url, port, clusterPort, latencyMs: 0, shardsPerGroup: 8, name: "ingress" })
        const main = Effect.map(call("GET", "/lanes"), (r) =>
          r.json.lanes.find((l: { lane: string }) => l.lane === "main"))
        const before = yield* call("GET", "/lanes")
        assert.strictEqual(before.status, 200)
        assert.strictEqual(before.json.runner, "ingress")
        assert.deepStrictEqual(
          before.json.lanes.map((l: { lane: string }) =>
            l.lane
          ),
          ["main", "heartbeat", "cron"]
        )
        assert.deepInclude(before.json.lanes[0], { paused: false, concurrent: 4, queued: 64, running: 0, waiting: 0 })

        const paused = yield* call("POST", "/lanes/main/pause")
        assert.deepStrictEqual([paused.status, paused.json], [200, { lane: "main", runner: "ingress", paused: true }])
        const reply = yield* Effect.forkChild(
          call("POST", "/sessions/erin/messages?wait=30000", JSON.stringify({ text: "held" }))
        )
        // The run reaches this runner's lane and waits there: nothing starts while it is paused.
        for (let polls = 0; (yield* main).waiting === 0; polls++) {
          if (polls === 500) assert.fail("the message never waited in the paused lane (10 s)")
          yield* Effect.sleep("20 millis")
        }
        assert.deepInclude(yield* main, { paused: true, running: 0, waiting: 1 })
        assert.isUndefined(reply.pollUnsafe())

        const limits = yield* call("PUT", "/lanes/main/limits", JSON.stringify({ concurrent: 2, queued: 5 }))
        assert.deepStrictEqual([limits.status, limits.json], [200, {
          lane: "main",
          runner: "ingress",
          concurrent: 2,
          queued: 5
        }])
        const refused = yield* Effect.all([
          call("POST", "/lanes/nope/pause"),
          call("POST", "/lanes/nope/resume"),
          call("PUT", "/lanes/nope/limits", JSON.stringify({ concurrent: 1 })),
          call("PUT", "/lanes/main/limits", JSON.stringify({ concurrent: 0 })),
          call("PUT", "/lanes/main/limits", JSON.stringify({ concurrent: 1.5 })),
          call("PUT", "/lanes/main/limits", JSON.stringify({ concurrent: "2" })),
          call("PUT", "/lanes/main/limits", JSON.stringify({ queued: -1 })),
          call("PUT", "/lanes/main/limits", JSON.stringify({})),
          call("PUT", "/lanes/main/limits", "not json"),
          call("PUT", "/lanes/main/limits", JSON.stringify({ queued: 10_001 })),
          call("PUT", "/lanes/main/limits", JSON.stringify({ concurrent: 3, bogus: 1 }))
        ])
        assert.deepStrictEqual(
          refused.map((r) => [r.status, r.json?._tag, r.json?.reason]),
          refused.map(() => [400, "RequestInvalid", "invalid"])
        )
        assert.include(refused[0].json.error, "`main`, `heartbeat`, `cron`, got `\"nope\"`")
        assert.match(
          refused[3].json.error,
          /^Expected a JSON body `\{ "concurrent"\?: <integer from 1>, "queued"\?: <integer from 0> \}`/
        )
        assert.include(refused[7].json.error, "at least one of `concurrent`, `queued`")
        assert.strictEqual(
          refused[9].json.error,
          "Expected `limits.queued` to be an integer from 0 through 10000, got `10001`"
        )
        // An unknown key next to a valid one: the whole body is refused, naming the key (concurrent stays 2).
        assert.include(refused[10].json.error, "Expected no excess property at [\"bogus\"]")
        assert.deepInclude(yield* main, { paused: true, concurrent: 2, queued: 5, waiting: 1 })

        const resumed = yield* call("POST", "/lanes/main/resume")
        assert.deepStrictEqual([resumed.status, resumed.json], [200, {
          lane: "main",
          runner: "ingress",
          paused: false
        }])
        const answered = yield* Fiber.join(reply)
        assert.deepStrictEqual([answered.status, answered.json.reply?.text], [200, "You said: held"])
        assert.deepInclude(yield* main, { paused: false, concurrent: 2, queued: 5 })
      })),
    60_000
  )

  it.live(
    "GET /status, /metrics (valid Prometheus text: HELP and TYPE for every family, read by a strict parser) and /healthz show this runner, its lanes, the members and the counters",
    () =>
      Effect.scoped(Effect.gen(function*() {
        yield* Runner.start({ postgres: db!.url, port, clusterPort, latencyMs: 0, shardsPerGroup: 8, name: "ingress" })
        yield* call("POST", "/sessions/carol/messages?wait=10000", JSON.stringify({ text: "hello" }))
        const status = yield* call("GET", "/status")
        assert.strictEqual(status.status, 200)
        assert.strictEqual(status.json.runner, "ingress")
        assert.deepStrictEqual(status.json.lanes.map((l: { lane: string }) => l.lane), ["main", "heartbeat", "cron"])
        assert.deepStrictEqual(status.json.members.map((m: { member: string }) => m.member), ["ingress"])
        assert.isAtLeast(status.json.counters.succeeded, 1)
        const metrics = yield* call("GET", "/metrics")
        const families = parsePrometheus(metrics.text)
        assert.deepStrictEqual(
          families.get("switchyard_lane_running")?.samples.get(`{lane="main",runner="ingress"}`),
          0
        )
        assert.strictEqual(families.get("switchyard_cluster_dispatched_total")?.type, "counter")
        assert.isAtLeast(families.get("switchyard_cluster_succeeded_total")?.samples.get(`{runner="ingress"}`) ?? 0, 1)
        assert.strictEqual(families.get("switchyard_cluster_shards")?.type, "gauge")
        assert.strictEqual(families.get("switchyard_cluster_replay_sweeps_total")?.type, "counter")
        assert.strictEqual(families.get("switchyard_cluster_replayed_total")?.type, "counter")
        for (const [name, f] of families) {
          assert.isAbove(f.help.length, 0, `${name} has a help text`)
          if (f.type === "counter") assert.match(name, /_total$/)
        }
        const health = yield* call("GET", "/healthz")
        assert.deepStrictEqual([health.status, health.json.ok], [200, true])
      })),
    60_000
  )

  /** As `call`, on a connection of its own (a stopping runner closes the idle ones `fetch` would reuse). */
  const fresh = (method: string, path: string, body?: string) =>
    Effect.promise(() =>
      new Promise<{ status: number; json: any }>((resolve, reject) => {
        const req = http.request({ host: "127.0.0.1", port, path, method, agent: false }, (res) => {
          let text = ""
          res.setEncoding("utf8")
          res.on("data", (c: string) => (text += c))
          res.on("end", () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) }))
        })
        req.on("error", reject)
        req.end(body)
      })
    )

  /** Until `check` holds, asking every 10 ms, for at most 10 s. */
  const until = (what: string, check: Effect.Effect<boolean>) =>
    Effect.gen(function*() {
      for (let i = 0; !(yield* check); i++) {
        if (i === 1_000) assert.fail(`${what} within 10 s`)
        yield* Effect.sleep("10 millis")
      }
    })

  it.live(
    "shutting down (Runner.stop) while a turn runs: /healthz is 503 `ok: false`, a new message 503 `closed`; the client waiting on the turn gets its reply",
    () =>
      Effect.scoped(Effect.gen(function*() {
        const runner = yield* Runner.start({
          postgres: db!.url,
          port,
          clusterPort,
          latencyMs: 3_000,
          shardsPerGroup: 8,
          name: "ingress"
        })
        const waiting = yield* Effect.forkChild(
          call("POST", "/sessions/erin/messages?wait=20000", JSON.stringify({ text: "slow" }))
        )
        yield* until(
          "the turn started",
          Effect.map(call("GET", "/lanes"), (r) =>
            r.json.lanes.find((l: { lane: string }) => l.lane === "main").running === 1)
        )
        const stopping = yield* Effect.forkChild(runner.stop)
        yield* until(
          "/healthz answered 503",
          Effect.map(fresh("GET", "/healthz"), (r) =>
            r.status === 503)
        )
        const [down, late] = yield* Effect.all([
          fresh("GET", "/healthz"),
          fresh("POST", "/sessions/frank/messages", JSON.stringify({ text: "late" }))
        ])
        assert.deepStrictEqual([down.status, down.json.ok], [503, false])
        assert.deepStrictEqual([late.status, late.json._tag, late.json.reason], [503, "Closed", "closed"])
        const reply = yield* Fiber.join(waiting)
        assert.deepStrictEqual([reply.status, reply.json.reply?.text], [200, "You said: slow"])
        assert.deepStrictEqual(yield* Fiber.join(stopping), { completed: 1, canceled: 0, timedOut: false })
      })),
    60_000
  )

  it.live(
    "with --token: every route but /healthz wants `Authorization: Bearer <token>` (401 JSON otherwise, also for a wrong token of another length), the runners' POST /internal/runs and their hop's upgrade (GET /internal/hop: runs and answers as lines) too; GET /openapi.json is the OpenAPI document of every route",
    () =>
      Effect.scoped(Effect.gen(function*() {
        yield* Runner.start({
          postgres: db!.url,
          port,
          clusterPort,
          latencyMs: 0,
          shardsPerGroup: 8,
          name: "ingress",
          token: "s3cret-token"
        })
        const auth = { authorization: "Bearer s3cret-token" }
        const refused = yield* Effect.all([
          call("GET", "/status"),
          call("GET", "/metrics", undefined, { authorization: "Bearer s3cret-tokeN" }),
          call("GET", "/openapi.json", undefined, { authorization: "Bearer x" }),
          call("POST", "/sessions/dora/messages", JSON.stringify({ text: "hi" }), {
            authorization: "Basic s3cret-token"
          }),
          call("POST", "/lanes/main/restart"),
          call("GET", "/lanes"),
          call("POST", "/lanes/main/pause"),
          call("POST", "/lanes/main/resume"),
          call("PUT", "/lanes/main/limits", JSON.stringify({ concurrent: 1 }))
        ])
        assert.deepStrictEqual(
          refused.map((r) => [r.status, r.json?._tag, r.json?.reason]),
          refused.map(() => [401, "Unauthorized", "unauthorized"])
        )
        // Without the token nothing is routed: an unknown path, another method on /healthz, a bad body, a
        // reserved session, a body over the limit are all 401 too, and no answer names a route.
        const unrouted = yield* Effect.all([
          call("GET", "/nowhere"),
          call("GET", "/nowhere", undefined, { authorization: "Bearer x" }),
          call("POST", "/healthz"),
          call("GET", "/healthz/"),
          call("GET", "/sessions/dora/messages"),
          call("POST", "/sessions/dora/messages", "not json"),
          call("POST", "/sessions/heartbeat/messages", JSON.stringify({ text: "hi" })),
          call("POST", "/sessions/dora/messages?wait=abc", JSON.stringify({ text: "hi" })),
          call("POST", "/sessions/dora/messages", JSON.stringify({ text: "a".repeat(70_000) }))
        ])
        assert.deepStrictEqual(
          unrouted.map((r) => [r.status, r.json?._tag, r.json?.reason]),
          unrouted.map(() => [401, "Unauthorized", "unauthorized"])
        )
        for (const r of [...refused, ...unrouted]) {
          assert.notInclude(r.text, "/sessions/:id")
          assert.strictEqual(r.headers.get("www-authenticate"), "Bearer")
        }
        // With the token an unknown path is the 404 that lists the routes.
        const lost = yield* call("GET", "/nowhere", undefined, { authorization: "bearer  s3cret-token" })
        assert.deepStrictEqual([lost.status, lost.json._tag], [404, "NotFound"])
        assert.include(lost.json.error, "POST /sessions/:id/messages")
        const health = yield* call("GET", "/healthz")
        assert.deepStrictEqual([health.status, health.json.ok], [200, true])
        const sent = yield* call("POST", "/sessions/dora/messages?wait=10000", JSON.stringify({ text: "hi" }), auth)
        assert.deepStrictEqual([sent.status, sent.json.reply?.text], [200, "You said: hi"])
        // The runners' own route (Hop.ts): the token too; a run in its body is run by its key's entity.
        const run = {
          runId: "relay-1",
          lane: "main",
          key: "relay",
          generation: 0,
          command: { type: "message", session: "relay", text: "via relay" },
          admittedAt: Date.now()
        }
        assert.strictEqual((yield* call("POST", "/internal/runs", JSON.stringify(run))).status, 401)
        assert.strictEqual((yield* call("GET", "/internal/runs", undefined, auth)).status, 405)
        assert.strictEqual((yield* call("POST", "/internal/runs", `{"runId":1}`, auth)).status, 400)
        const relayed = yield* call("POST", "/internal/runs", JSON.stringify(run), auth)
        assert.deepStrictEqual([relayed.status, relayed.json.ok?.text], [200, "You said: via relay"])
        // The hop's connection (HopWire.ts): an upgrade of GET /internal/hop, the token checked once for it;
        // then runs as lines `<id>\t<JSON>`, each answered by a line with its id (`-`: no answer here).
        const refusedHop = yield* Effect.promise(() => hop("/internal/hop", {}, []))
        assert.deepStrictEqual([refusedHop.status, refusedHop.lines], [401, []])
        assert.strictEqual((yield* Effect.promise(() => hop("/internal/elsewhere", auth, []))).status, 404)
        const viaHop = {
          ...run,
          runId: "hop-1",
          key: "viahop",
          command: { ...run.command, session: "viahop", text: "via hop" }
        }
        const hopped = yield* Effect.promise(() =>
          hop("/internal/hop", auth, [`7\t{"runId":1}\n`, `8\t${JSON.stringify(viaHop)}\n9\t${JSON.stringify(run)}\n`])
        )
        assert.strictEqual(hopped.status, 101)
        assert.deepStrictEqual(hopped.lines.map((l) => l.split("\t", 1)[0]).sort(), ["7", "8", "9"])
        const byId = new Map(hopped.lines.map((l) => [l.slice(0, l.indexOf("\t")), l.slice(l.indexOf("\t") + 1)]))
        assert.strictEqual(byId.get("7"), "-")
        assert.strictEqual(JSON.parse(byId.get("8")!).ok?.text, "You said: via hop")
        // A run sent again (relay-1, answered above) gets its answer, not a second turn.
        assert.strictEqual(JSON.parse(byId.get("9")!).ok?.text, "You said: via relay")
        const metrics = yield* call("GET", "/metrics", undefined, auth)
        assert.strictEqual(parsePrometheus(metrics.text).get("switchyard_cluster_dispatched_total")?.type, "counter")
        const spec = yield* call("GET", "/openapi.json", undefined, auth)
        assert.strictEqual(spec.status, 200)
        assert.match(String(spec.json.openapi), /^3\./)
        // The API's version is the package's (not effect/http-api's default 0.0.1).
        assert.strictEqual(spec.json.info.version, JSON.parse(fs.readFileSync("package.json", "utf8")).version)
        assert.deepStrictEqual(Object.keys(spec.json.paths).sort(), [
          "/healthz",
          "/lanes",
          "/lanes/{lane}/limits",
          "/lanes/{lane}/pause",
          "/lanes/{lane}/restart",
          "/lanes/{lane}/resume",
          "/metrics",
          "/openapi.json",
          "/sessions/{id}/cancel",
          "/sessions/{id}/messages",
          "/status"
        ])
        assert.includeMembers(Object.keys(spec.json.paths["/lanes/{lane}/limits"].put.responses), ["200", "400", "401"])
        // Pause and limits are this runner's own: the lane on the other routes is untouched until then.
        assert.deepInclude((yield* call("GET", "/lanes", undefined, auth)).json.lanes[0], { paused: false })
        assert.includeMembers(Object.keys(spec.json.paths["/sessions/{id}/messages"].post.responses), [
          "200",
          "202",
          "400",
          "401",
          "429",
          "502",
          "503"
        ])
      })),
    60_000
  )

  it.live(
    "a runner refuses a non-loopback host without a token: Runner.start fails, the runner command prints one line and exits 1",
    () =>
      Effect.gen(function*() {
        const started = yield* Effect.exit(
          Effect.scoped(Runner.start({ postgres: db!.url, port, clusterPort, host: "0.0.0.0", shardsPerGroup: 8 }))
        )
        assert.isTrue(started._tag === "Failure")
        const { spawnSync } = yield* Effect.promise(() => import("node:child_process"))
        const out = spawnSync(process.execPath, [
          ...nodeArgs("src/cluster/runner-main.ts"),
          "--postgres",
          db!.url,
          "--port",
          String(port),
          "--host",
          "0.0.0.0"
        ], {
          encoding: "utf8",
          env: { ...process.env, SWITCHYARD_TOKEN: "" },
          timeout: 30_000
        })
        assert.strictEqual(out.status, 1)
        assert.deepStrictEqual(out.stderr.trim().split("\n"), [
          "runner: Expected a token (--token or SWITCHYARD_TOKEN) to listen on `0.0.0.0`, which is not a loopback address, got none"
        ])
      }),
    60_000
  )
})
