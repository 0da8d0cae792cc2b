/**
 * A local HTTP server for channel tests: listens on 127.0.0.1 on a free port, records every request
 * (method, path, headers, body) and answers as the test's `handle` says. `arrived(n)` resolves once
 * `n` requests have been read in full (a latch, never a sleep). `close` destroys open sockets too, so
 * a request the handler never answered does not keep the test waiting.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"

/** A request the server read. */
export interface Recorded {
  readonly method: string
  readonly path: string
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
}

/** Answers a request: write to `res` (or leave it hanging, or destroy the socket). */
export type Handle = (request: Recorded, res: http.ServerResponse, req: http.IncomingMessage) => void | Promise<void>

export interface TestServer {
  /** `http://127.0.0.1:<port>` */
  readonly url: string
  readonly requests: Array<Recorded>
  /** Resolves once `count` requests have arrived in all. */
  readonly arrived: (count: number) => Promise<void>
  readonly close: () => Promise<void>
}

export const startServer = async (handle: Handle): Promise<TestServer> => {
  const requests: Array<Recorded> = []
  const waiters: Array<{ readonly count: number; readonly resolve: () => void }> = []
  const server = http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const recorded: Recorded = {
        method: req.method ?? "",
        path: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8")
      }
      requests.push(recorded)
      for (const w of waiters.splice(0)) {
        if (requests.length >= w.count) w.resolve()
        else waiters.push(w)
      }
      void Promise.resolve(handle(recorded, res, req)).catch((error) => {
        res.destroy(error instanceof Error ? error : new Error(String(error)))
      })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    arrived: (count) =>
      requests.length >= count
        ? Promise.resolve()
        : new Promise<void>((resolve) => void waiters.push({ count, resolve })),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

/** Answers with `status`, optional headers and a JSON body. */
export const answer = (
  res: http.ServerResponse,
  status: number,
  body: unknown = {},
  headers: Record<string, string> = {}
): void => {
  res.writeHead(status, { "content-type": "application/json", ...headers })
  res.end(JSON.stringify(body))
}
