/**
 * The runner's small HTTP ingress (plain node:http):
 *
 * - `POST /sessions/:id/messages` with `{ "text": "...", "id"?: "..." }` dispatches a turn on lane
 *   `main` keyed by the session. 202 `{ runId, session, runner }` once the message is durable in the
 *   cluster. With `?wait=<ms>` it waits up to that long for the reply: 200 `{ runId, reply }`. A
 *   client `id` is the run id: sending the same message again (after a timeout, to another runner)
 *   joins the first run instead of adding one.
 * - `POST /lanes/:lane/restart`: `restartLane` for the whole cluster; 200 `{ lane, generation }` once
 *   every live runner applied it (the runs of older generations failed `stale`).
 * - `GET /status`: this runner's shards and resident entities, its lanes, the cluster's live members,
 *   counters, delivery stats (JSON).
 * - `GET /metrics`: the same numbers in Prometheus text format.
 * - `GET /healthz`: 200 while the runner takes messages.
 */
import { Effect, Exit, Metric } from "effect"
import { ClusterMetrics } from "effect/cluster"
import type { Scope } from "effect"
import * as http from "node:http"
import type { ClusterDelivery } from "./ClusterDelivery.js"
import type { ClusterQueue } from "./ClusterQueue.js"
import type { PgDeliveryLog } from "./PgDeliveryLog.js"

/** Options of {@link serve}. */
export interface IngressOptions {
  readonly queue: ClusterQueue
  readonly delivery: ClusterDelivery
  readonly outbox: PgDeliveryLog
  readonly port: number
  /** Default `127.0.0.1`. */
  readonly host?: string
  /** Largest request body, default 64 KiB. */
  readonly maxBodyBytes?: number
  /** Longest `?wait=` honoured, default 60_000 ms. */
  readonly maxWaitMs?: number
  /** On close, how long requests in flight may still finish; default 10_000 ms. */
  readonly closeGraceMs?: number
}

const json = (res: http.ServerResponse, status: number, body: unknown) => {
  const text = JSON.stringify(body)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
  res.end(text)
}

/** What `/status` returns. */
export const status = (options: Pick<IngressOptions, "queue" | "delivery" | "outbox">) =>
  Effect.gen(function*() {
    const lanes = yield* options.queue.snapshot
    const members = yield* options.queue.members
    const counters = yield* options.queue.counters
    const delivery = yield* options.delivery.stats
    const outbox = yield* options.outbox.stats
    const gauge = (m: Metric.Metric<bigint, { readonly value: bigint }>) => Effect.map(Metric.value(m), (s) => Number(s.value))
    return {
      runner: options.queue.member,
      // effect/cluster's own view of this runner: shards it holds, entities resident here.
      cluster: {
        shards: yield* gauge(ClusterMetrics.shards),
        entities: yield* gauge(ClusterMetrics.entities),
        singletons: yield* gauge(ClusterMetrics.singletons)
      },
      lanes,
      members,
      counters,
      delivery: { ...delivery, pending: outbox.pending, dead: outbox.dead }
    }
  })

const metricsText = (s: Effect.Success<ReturnType<typeof status>>): string => {
  const lines: Array<string> = []
  const runner = JSON.stringify(s.runner)
  for (const [name, value] of Object.entries(s.counters)) {
    lines.push(`switchyard_cluster_${name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}{runner=${runner}} ${value}`)
  }
  for (const l of s.lanes) {
    const labels = `{runner=${runner},lane=${JSON.stringify(l.lane)}}`
    lines.push(`switchyard_lane_running${labels} ${l.running}`)
    lines.push(`switchyard_lane_waiting${labels} ${l.waiting}`)
    lines.push(`switchyard_lane_generation${labels} ${l.generation}`)
  }
  lines.push(`switchyard_cluster_members{runner=${runner}} ${s.members.length}`)
  lines.push(`switchyard_cluster_shards{runner=${runner}} ${s.cluster.shards}`)
  lines.push(`switchyard_cluster_entities{runner=${runner}} ${s.cluster.entities}`)
  for (const [name, value] of Object.entries(s.delivery)) {
    lines.push(`switchyard_delivery_${name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}{runner=${runner}} ${value}`)
  }
  return lines.join("\n") + "\n"
}

/** Serves the ingress for the Scope's lifetime; closing the Scope stops taking requests. */
export const serve = (options: IngressOptions): Effect.Effect<http.Server, Error, Scope.Scope> =>
  Effect.gen(function*() {
    const context = yield* Effect.context<never>()
    const run = Effect.runPromiseWith(context)
    const maxBody = options.maxBodyBytes ?? 64 * 1024
    const maxWaitMs = options.maxWaitMs ?? 60_000
    let closing = false

    const onMessage = (session: string, body: unknown, waitMs: number) =>
      Effect.gen(function*() {
        const b = body as { text?: unknown; id?: unknown }
        if (typeof b !== "object" || b === null || typeof b.text !== "string" || b.text.length === 0) {
          return [400, { error: "Expected a JSON body `{ \"text\": <non-empty string>, \"id\"?: <string> }`" }] as const
        }
        if (b.id !== undefined && typeof b.id !== "string") {
          return [400, { error: `Expected \`id\` to be a string, got \`${JSON.stringify(b.id)}\`` }] as const
        }
        const dispatched = yield* Effect.exit(options.queue.dispatch("main", session, { type: "message", session, text: b.text }, {
          ...(b.id === undefined ? {} : { runId: `msg:${session}:${b.id}` })
        }))
        if (Exit.isFailure(dispatched)) {
          const e = dispatched.cause.reasons.find((r) => r._tag === "Fail")
          const err = e !== undefined && e._tag === "Fail" ? e.error : undefined
          if (err?._tag === "AdmissionError") return [err.reason === "full" ? 429 : 503, { error: err.message, reason: err.reason }] as const
          if (err?._tag === "RequestError") return [400, { error: err.message }] as const
          return [500, { error: "dispatch failed" }] as const
        }
        const future = dispatched.value
        const accepted = { runId: future.runId, session, runner: options.queue.member }
        if (waitMs <= 0) return [202, accepted] as const
        const outcome = yield* Effect.exit(future.awaitTimeout(`${Math.min(waitMs, maxWaitMs)} millis`))
        if (Exit.isSuccess(outcome)) return [200, { ...accepted, reply: outcome.value }] as const
        const f = outcome.cause.reasons.find((r) => r._tag === "Fail")
        const err = f !== undefined && f._tag === "Fail" ? (f.error as { _tag?: string; message?: string; reason?: string }) : undefined
        if (err?._tag === "FutureTimeout") return [202, { ...accepted, pending: true }] as const
        return [502, { ...accepted, error: err?.message ?? "the turn failed", ...(err?.reason ? { reason: err.reason } : {}) }] as const
      })

    const server = http.createServer((req, res) => {
      const url = new URL(req.url ?? "/", "http://ingress")
      const route = url.pathname.match(/^\/sessions\/([^/]+)\/messages$/)
      if (req.method === "POST" && route) {
        if (closing) return json(res, 503, { error: "The runner is shutting down", reason: "closed" })
        const chunks: Array<Buffer> = []
        let size = 0
        req.on("data", (c: Buffer) => {
          size += c.length
          if (size > maxBody) {
            json(res, 413, { error: `Expected a body of at most ${maxBody} bytes` })
            req.destroy()
          } else chunks.push(c)
        })
        req.on("end", () => {
          if (res.writableEnded) return
          let body: unknown
          try {
            body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
          } catch {
            return json(res, 400, { error: "Expected a JSON body" })
          }
          const session = decodeURIComponent(route[1])
          const waitMs = Number(url.searchParams.get("wait") ?? "0") || 0
          run(onMessage(session, body, waitMs)).then(
            ([code, out]) => json(res, code, out),
            () => json(res, 500, { error: "internal error" })
          )
        })
        return
      }
      const restart = url.pathname.match(/^\/lanes\/([^/]+)\/restart$/)
      if (req.method === "POST" && restart) {
        const lane = decodeURIComponent(restart[1])
        run(Effect.exit(options.queue.restartLane(lane))).then(
          (exit) =>
            Exit.isSuccess(exit)
              ? json(res, 200, { lane, generation: exit.value })
              : json(res, 400, { error: `Unknown lane \`${lane}\`` }),
          () => json(res, 500, { error: "internal error" })
        )
        return
      }
      if (req.method === "GET" && (url.pathname === "/status" || url.pathname === "/metrics")) {
        run(status(options)).then(
          (s) => {
            if (url.pathname === "/status") return json(res, 200, s)
            res.writeHead(200, { "content-type": "text/plain; version=0.0.4" })
            res.end(metricsText(s))
          },
          () => json(res, 500, { error: "status unavailable" })
        )
        return
      }
      if (req.method === "GET" && url.pathname === "/healthz") {
        return json(res, closing ? 503 : 200, { ok: !closing, runner: options.queue.member })
      }
      json(res, 404, { error: "Not found: POST /sessions/:id/messages, POST /lanes/:lane/restart, GET /status, GET /metrics, GET /healthz" })
    })
    server.keepAliveTimeout = 5_000
    yield* Effect.acquireRelease(
      Effect.callback<void, Error>((resume) => {
        server.once("error", (e) => resume(Effect.fail(e)))
        server.listen(options.port, options.host ?? "127.0.0.1", () => resume(Effect.void))
      }),
      () =>
        Effect.callback<void>((resume) => {
          closing = true
          server.close(() => resume(Effect.void))
          server.closeIdleConnections()
          // Requests still waiting for a reply (`?wait`) get `closeGraceMs`, then their sockets close.
          const timer = setTimeout(() => server.closeAllConnections(), options.closeGraceMs ?? 10_000)
          timer.unref()
        })
    )
    return server
  })
