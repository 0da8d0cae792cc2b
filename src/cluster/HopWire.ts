/**
 * The wire of the runners' hop (Hop.ts, docs/cluster.md "One hop between runners"): one persistent
 * connection from a runner's ingress to another's, opened as an HTTP upgrade of `GET /internal/hop` on the
 * ingress port (so the same `--host`:`--port`, the same bearer token, checked once per connection), then
 * lines both ways: `<id>\t<JSON>\n`. A request line carries a run (protocol.ts `RunNow`'s payload), its answer
 * line the same id and the run's answer as Answers.ts stores it (`{"ok": ...}` / `{"err": ...}`), or `-`
 * when it got no answer there (the sender then sends the run the usual way). `JSON.stringify` escapes every
 * control character, so a JSON text never holds a raw newline: a line is a frame, no length prefix.
 *
 * Against `POST /internal/runs` (node:http, one request per run: its request line, headers, the parser on
 * each side, a response head): one socket write and one read each way, and the writes of one turn of the
 * event loop go out as one (the lines of concurrent runs share a write).
 */
import type * as net from "node:net"
import { StringDecoder } from "node:string_decoder"

/** The path of the upgrade request (IngressHop.ts serves it, on the ingress's server). */
export const HOP_PATH = "/internal/hop"
/** The `Upgrade` protocol name both sides ask for. */
export const HOP_PROTOCOL = "switchyard-hop/1"
/** The answer line of a run that got no answer where it was sent. */
export const NO_ANSWER = "-"

/** The line of `text` (a JSON text, or {@link NO_ANSWER}) for request `id`. */
export const line = (id: number, text: string): string => `${id}\t${text}\n`

/**
 * Reads lines from `socket` (its `head` first: what came with the upgrade) and calls `onLine` with each one's
 * id and text. A line longer than `maxLine` characters, or one without an id, ends the connection.
 */
export const readLines = (
  socket: net.Socket,
  head: Buffer,
  maxLine: number,
  onLine: (id: number, text: string) => void
): void => {
  let rest = ""
  const feed = (chunk: string) => {
    let text = rest.length === 0 ? chunk : rest + chunk
    let start = 0
    for (let end = text.indexOf("\n"); end !== -1; end = text.indexOf("\n", start)) {
      const tab = text.indexOf("\t", start)
      const id = tab === -1 || tab > end ? NaN : Number(text.slice(start, tab))
      if (!Number.isSafeInteger(id)) return void socket.destroy()
      onLine(id, text.slice(tab + 1, end))
      start = end + 1
    }
    text = start === 0 ? text : text.slice(start)
    if (text.length > maxLine) return void socket.destroy()
    rest = text
  }
  // Not `socket.setEncoding`: node:http forbids it on its sockets, upgraded ones too. A character split
  // between two chunks waits in the decoder.
  const decoder = new StringDecoder("utf8")
  socket.on("data", (chunk: Buffer) => feed(decoder.write(chunk)))
  if (head.length > 0) feed(decoder.write(head))
}

/**
 * A writer of lines to `socket` that sends the lines of one turn of the event loop in one write (at the
 * next `setImmediate`): concurrent runs share a syscall and a wake-up of the other side.
 */
export const batched = (socket: net.Socket): (text: string) => void => {
  let pending = ""
  let scheduled = false
  const flush = () => {
    scheduled = false
    const out = pending
    pending = ""
    if (!socket.destroyed) socket.write(out)
  }
  return (text) => {
    pending += text
    if (!scheduled) {
      scheduled = true
      setImmediate(flush)
    }
  }
}
