/**
 * The runners' hop alone, its transport (src/cluster/Hop.ts, HopWire.ts): a run's payload as the ingress sends
 * it (a message with 40 rows of history, ~2.6 KB of JSON; the history a string since session 13) to another process that decodes it as Ingress.ts
 * does (`JSON.parse` and the `RunNow` payload's Schema) and answers a turn's answer on its next event-loop
 * turn. Two ways, alternated: `http`, a node:http `POST /internal/runs` per run over keep-alive connections
 * (the hop until session 12); `lines`, one upgraded connection carrying `<id>\t<JSON>\n` lines both ways,
 * the writes of one event-loop turn batched (the hop now). CPU per hop of the sending process and of the
 * receiving one (`/proc/<pid>/stat`), 16 runs in flight and one at a time. `npm run bench -- hop-wire`.
 */
import { Option, Schema } from "effect"
import { fork } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import type * as net from "node:net"
import { parseStarted } from "../src/cluster/Coalesce.js"
import * as HopWire from "../src/cluster/HopWire.js"
import { RunNow } from "../src/cluster/protocol.js"
import { table } from "./lib.js"

const ROUNDS = Number(process.env.HOP_WIRE_ROUNDS ?? 4)
const HOPS = Number(process.env.HOP_WIRE_HOPS ?? 10_000)

const cpuMs = (pid: number) => {
  const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")
  return (Number(f[11]) + Number(f[12])) * 10 // utime + stime, 100 ticks per second
}
const decodeRun = Schema.decodeUnknownOption(RunNow.payloadSchema)
const answerText = JSON.stringify({
  ok: { text: "You said: m123", deliveryId: "bbe16cd8-4383-4dd9-9adb-4d9e08d7e8ea", turnRunner: "r1", messages: 1 }
})
const decodes = (text: string) => {
  try {
    return Option.isSome(decodeRun(JSON.parse(text)))
  } catch {
    return false
  }
}

/** The receiving side: both ways on one port. */
const serve = () => {
  const server = http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      const ok = decodes(Buffer.concat(chunks).toString("utf8"))
      setImmediate(() => {
        const body = ok ? answerText : "{}"
        res.writeHead(ok ? 200 : 400, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
        res.end(body)
      })
    })
  })
  server.on("upgrade", (_req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: ${HopWire.HOP_PROTOCOL}\r\nconnection: Upgrade\r\n\r\n`)
    socket.setNoDelay(true)
    const write = HopWire.batched(socket)
    HopWire.readLines(socket, head, 1 << 20, (id, text) => {
      const ok = decodes(text)
      setImmediate(() => write(HopWire.line(id, ok ? answerText : HopWire.NO_ANSWER)))
    })
  })
  server.listen(0, "127.0.0.1", () => process.send!((server.address() as net.AddressInfo).port))
}

/** A session's history as the slot statement returns it (JSON text of `[role, content]` rows, oldest first). */
const historyText = (rows: number) =>
  JSON.stringify(Array.from({ length: rows }, (_, i) => [
    i % 2 === 0 ? "user" : "assistant",
    i % 2 === 0 ? `m${1000 + i}` : `You said: m${1000 + i}`
  ]))
const history40 = historyText(40)
const runFields = (i: number) => ({
  runId: `coalesce:main:s${i % 50}:${i}`,
  lane: "main",
  key: `s${i % 50}`,
  generation: 0,
  command: { type: "message", session: `s${i % 50}`, text: `m${i}`, inbox: true },
  admittedAt: Date.now(),
  coalesceSlot: i
})
/** The run as the ingress sends it (since session 13 its history passed through as the statement's text). */
const payload = (i: number) =>
  JSON.stringify({ ...runFields(i), startedRaw: { texts: [`m${i}`], history: history40, rows: 40 } })

/**
 * The codec work a hopped run's history costs, sender and receiver in this process (no transport): `parsed`,
 * until session 13: the history parsed where the message arrived (`JSON.parse` and a row object each), the run
 * encoded with it, the line parsed and Schema-decoded row by row on the other side; `passed through`: the
 * statement's text carried as a string, the line parsed and decoded, the history parsed once (`parseStarted`)
 * where the turn runs. CPU µs per hop, rounds alternated.
 */
const codec = (rows: number) => {
  const text = historyText(rows)
  let sink = 0
  const ways = {
    parsed: (i: number) => {
      const history = (JSON.parse(text) as Array<[string, string]>).map(([role, content]) => ({ role, content }))
      const line = JSON.stringify({ ...runFields(i), prefetched: { texts: [`m${i}`], history, rows: 40 } })
      const run = decodeRun(JSON.parse(line))
      if (Option.isSome(run)) sink += run.value.prefetched!.history.length
    },
    "passed through": (i: number) => {
      const line = JSON.stringify({ ...runFields(i), startedRaw: { texts: [`m${i}`], history: text, rows: 40 } })
      const run = decodeRun(JSON.parse(line))
      if (Option.isSome(run)) sink += parseStarted(run.value.startedRaw!)!.history.length
    }
  }
  const n = 20_000
  const time = (f: (i: number) => void) => {
    const c0 = process.cpuUsage()
    for (let i = 0; i < n; i++) f(i)
    const c = process.cpuUsage(c0)
    return (c.user + c.system) / n
  }
  for (let r = 0; r < 2; r++) for (const f of Object.values(ways)) time(f) // warm-up
  const results: Record<keyof typeof ways, Array<number>> = { parsed: [], "passed through": [] }
  for (let r = 0; r < 2 * ROUNDS; r++) {
    const order = r % 2 === 0 ? (["parsed", "passed through"] as const) : (["passed through", "parsed"] as const)
    for (const way of order) results[way].push(time(ways[way]))
  }
  if (sink !== 2 * (2 * ROUNDS + 2) * n * rows) throw new Error("a decoded history lost rows")
  const med = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  return { parsed: med(results.parsed), passedThrough: med(results["passed through"]) }
}

const viaHttp = (port: number) => {
  const agent = new http.Agent({ keepAlive: true })
  return (body: string) =>
    new Promise<string>((resolve, reject) => {
      const req = http.request(
        {
          host: "127.0.0.1",
          port,
          path: "/internal/runs",
          method: "POST",
          agent,
          headers: { "content-type": "application/json" }
        },
        (res) => {
          const chunks: Array<Buffer> = []
          res.on("data", (c: Buffer) => chunks.push(c))
          res.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
        }
      )
      req.on("error", reject)
      req.end(body)
    })
}

const viaLines = async (port: number) => {
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    const req = http.request({
      host: "127.0.0.1",
      port,
      path: HopWire.HOP_PATH,
      method: "GET",
      agent: false,
      headers: { connection: "Upgrade", upgrade: HopWire.HOP_PROTOCOL }
    })
    req.on("upgrade", (_res, s: net.Socket) => resolve(s))
    req.on("error", reject)
    req.end()
  })
  socket.setNoDelay(true)
  const waiting = new Map<number, (text: string) => void>()
  HopWire.readLines(socket, Buffer.alloc(0), 1 << 20, (id, text) => {
    const done = waiting.get(id)
    waiting.delete(id)
    done?.(text)
  })
  const write = HopWire.batched(socket)
  let next = 0
  return {
    socket,
    send: (body: string) =>
      new Promise<string>((resolve) => {
        const id = ++next
        waiting.set(id, resolve)
        write(HopWire.line(id, body))
      })
  }
}

if (process.env.HOP_WIRE_SERVER === "1") {
  serve()
} else {
  const child = fork(import.meta.filename, [], {
    execArgv: ["--import", "tsx"],
    env: { ...process.env, HOP_WIRE_SERVER: "1" }
  })
  try {
    const port = await new Promise<number>((resolve) => child.once("message", (m) => resolve(m as number)))
    const lines = await viaLines(port)
    const ways = { http: viaHttp(port), lines: lines.send }
    const measure = async (send: (body: string) => Promise<string>, inFlight: number, count: number) => {
      let i = 0
      const run = () =>
        Promise.all(Array.from({ length: inFlight }, async () => {
          while (i < count) JSON.parse(await send(payload(i++)))
        }))
      const c0 = process.cpuUsage()
      const s0 = cpuMs(child.pid!)
      const t0 = performance.now()
      await run()
      const c = process.cpuUsage(c0)
      return {
        sender: (c.user + c.system) / count,
        receiver: ((cpuMs(child.pid!) - s0) * 1000) / count,
        perSecond: count / ((performance.now() - t0) / 1000)
      }
    }
    const rows: Array<{ name: string } & Record<string, string | number>> = []
    for (const inFlight of [16, 1]) {
      const count = inFlight === 1 ? Math.round(HOPS / 4) : HOPS
      const results: Record<string, Array<Awaited<ReturnType<typeof measure>>>> = { http: [], lines: [] }
      for (const way of ["http", "lines"] as const) await measure(ways[way], inFlight, count) // warm-up
      for (let r = 0; r < ROUNDS; r++) {
        const order: ReadonlyArray<"http" | "lines"> = r % 2 === 0 ? ["http", "lines"] : ["lines", "http"]
        for (const way of order) {
          results[way].push(await measure(ways[way], inFlight, count))
        }
      }
      for (const way of ["http", "lines"] as const) {
        const med = (f: (x: Awaited<ReturnType<typeof measure>>) => number) =>
          [...results[way].map(f)].sort((a, b) => a - b)[Math.floor(results[way].length / 2)]!
        rows.push({
          name: `${
            way === "http" ? "node:http POST per run" : "lines on one upgraded connection"
          }, ${inFlight} in flight`,
          "sender CPU µs/hop": med((x) => x.sender),
          "receiver CPU µs/hop": med((x) => x.receiver),
          "both µs/hop": med((x) => x.sender + x.receiver),
          "hops/s": med((x) => x.perSecond)
        })
      }
    }
    table(
      `The hop's transport alone: ${HOPS} runs per round (2,500 one at a time), ${ROUNDS} rounds alternated, medians`,
      rows
    )
    lines.socket.destroy()
    table(
      `A hopped run's history, codec only (sender and receiver in one process): CPU µs per hop, ${
        2 * ROUNDS
      } rounds of 20,000 alternated, medians`,
      [40, 12].map((rows) => {
        const r = codec(rows)
        return {
          name: `${rows} rows of history`,
          "parsed, encoded, decoded by row (until session 13)": r.parsed,
          "passed through as the statement's text": r.passedThrough,
          ratio: `${(r.parsed / r.passedThrough).toFixed(2)}x`
        }
      })
    )
  } finally {
    child.kill()
  }
}
