/**
 * The ingress's side of the runners' hop (Hop.ts, HopWire.ts, docs/cluster.md "One hop between
 * runners"): `GET /internal/hop` upgraded on the ingress's own server, with the bearer token (as every
 * route but /healthz) and only while the runner takes messages; then another ingress's runs, one line
 * each, relayed here and answered by line. Ingress.ts owns the server, the drain and the relay.
 */
import type { Effect, Exit, Option } from "effect"
import * as http from "node:http"
import type * as net from "node:net"
import * as Answers from "./Answers.js"
import type { RunNowPayload } from "./ClusterQueueTypes.js"
import * as HopWire from "./HopWire.js"
import { authorized, UNAUTHORIZED } from "./IngressChecks.js"
import * as Timing from "./Timing.js"

/** What the ingress lends the hop's server. */
export interface HopServerOptions {
  readonly server: http.Server
  readonly token: string | undefined
  /** Runs a relayed run where it belongs; `undefined`: this ingress relays nothing (the upgrade is 404). */
  readonly relay: ((payload: RunNowPayload) => Effect.Effect<Exit.Exit<unknown, unknown>>) | undefined
  /** Longest line (a run's JSON) accepted. */
  readonly maxLine: number
  readonly accepting: () => boolean
  readonly decodeRun: (u: unknown) => Option.Option<RunNowPayload>
  /** Runs an Effect with the ingress's services. */
  readonly run: <A>(effect: Effect.Effect<A>) => Promise<A>
  /** A relayed run started / ended (the drain waits for the ones started). */
  readonly started: () => void
  readonly ended: () => void
}

/** Serve the hop's upgrades on `options.server`; `close` ends every hop connection (with the server). */
export const serve = (options: HopServerOptions): { readonly close: () => void } => {
  const sockets = new Set<net.Socket>()
  const served = (
    relay: (payload: RunNowPayload) => Effect.Effect<Exit.Exit<unknown, unknown>>,
    socket: net.Socket,
    head: Buffer
  ) => {
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nupgrade: ${HopWire.HOP_PROTOCOL}\r\nconnection: Upgrade\r\n\r\n`
    )
    socket.setNoDelay(true)
    sockets.add(socket)
    socket.on("close", () => sockets.delete(socket))
    const write = HopWire.batched(socket)
    const answer = (id: number, text: string | undefined) => write(HopWire.line(id, text ?? HopWire.NO_ANSWER))
    HopWire.readLines(socket, head, options.maxLine, (id, text) => {
      // While shutting down, as `POST /internal/runs`' 503: the sender sends it the usual way.
      if (!options.accepting()) return answer(id, undefined)
      const arrived = Timing.enabled ? Timing.now() : 0
      let payload: Option.Option<RunNowPayload> | undefined
      try {
        payload = options.decodeRun(JSON.parse(text))
      } catch {
        payload = undefined
      }
      if (payload === undefined || payload._tag === "None") return answer(id, undefined)
      const runId = payload.value.runId
      Timing.mark(runId, "relayArrived", arrived)
      Timing.mark(runId, "relayDecoded")
      options.started()
      // The run goes on if the sender stops waiting (only Cancel stops a run).
      void options.run(relay(payload.value)).then((exit) => {
        Timing.mark(runId, "relayAnswered")
        answer(id, Answers.encode(exit))
      }, () => answer(id, undefined)).finally(options.ended)
    })
  }
  options.server.on("upgrade", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    const refuse = (status: number, body: string) => {
      socket.end(
        `HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\ncontent-type: application/json\r\ncontent-length: ${
          Buffer.byteLength(body)
        }\r\nconnection: close\r\n\r\n${body}`
      )
    }
    socket.on("error", () => socket.destroy())
    if (!authorized(req.headers.authorization, options.token)) return refuse(401, UNAUTHORIZED)
    if (
      options.relay === undefined || req.method !== "GET" || req.url !== HopWire.HOP_PATH ||
      req.headers.upgrade !== HopWire.HOP_PROTOCOL
    ) {
      return refuse(404, JSON.stringify({ error: "Expected GET /internal/hop, upgrade " + HopWire.HOP_PROTOCOL }))
    }
    if (!options.accepting()) return refuse(503, JSON.stringify({ error: "Expected a runner that takes messages" }))
    served(options.relay, socket, head)
  })
  return {
    close: () => {
      for (const socket of sockets) socket.destroy()
    }
  }
}
