/**
 * What the chatbot prints. With `--json` standard output carries only JSON lines (one per event);
 * otherwise replies are printed as text, and in a TTY a turn shows "…thinking" on standard error
 * and its reply streams as it arrives. Errors always go to standard error, one line each.
 */
import type { AgentEvent, ReplyBody } from "../../src/agent/index.js"

/** The output of one chatbot process. */
export interface Output {
  readonly json: boolean
  /** One JSON event on standard output (only in JSON mode). */
  readonly event: (value: Record<string, unknown>) => void
  /** A line for people on standard output (ignored in JSON mode). */
  readonly say: (line: string) => void
  /** A line for people on standard error (ignored in JSON mode). */
  readonly note: (line: string) => void
  /** An error line on standard error (always). */
  readonly error: (line: string) => void
  /** Agent events (progress and streaming in a TTY). */
  readonly onAgentEvent: (event: AgentEvent) => void
  /** Whether the reply with this body was already shown as it streamed (so the delivery prints nothing more). */
  readonly wasStreamed: (reply: ReplyBody) => boolean
}

/** Makes the output for these options; `tty` says whether standard output is a terminal. */
export const makeOutput = (options: { readonly json: boolean; readonly tty: boolean; readonly session: string }): Output => {
  const { json, tty } = options
  const out = (line: string) => void process.stdout.write(line + "\n")
  const err = (line: string) => void process.stderr.write(line + "\n")
  const streamed = new Set<string>()
  let thinking = false
  let streaming: string | undefined

  const clearThinking = () => {
    if (thinking) {
      process.stderr.write("\r\x1b[K")
      thinking = false
    }
  }

  const onAgentEvent = (event: AgentEvent) => {
    if (json || !tty) return
    if (event.type === "turn-started" && event.kind === "user" && event.session === options.session) {
      process.stderr.write("…thinking")
      thinking = true
    } else if (event.type === "text" && event.kind === "user" && event.session === options.session) {
      clearThinking()
      const key = `${event.session}#${event.turn}`
      if (streaming !== key) {
        if (streaming !== undefined) process.stdout.write("\n")
        streaming = key
        streamed.add(key)
        process.stdout.write("bot> ")
      }
      process.stdout.write(event.chunk)
    } else if ((event.type === "turn-ended" || event.type === "turn-failed") && event.session === options.session) {
      clearThinking()
      if (streaming !== undefined) {
        process.stdout.write("\n")
        streaming = undefined
      }
    }
  }

  return {
    json,
    event: (value) => {
      if (json) out(JSON.stringify(value))
    },
    say: (line) => {
      if (!json) out(line)
    },
    note: (line) => {
      if (!json) err(line)
    },
    error: (line) => {
      clearThinking()
      err(line)
    },
    onAgentEvent,
    wasStreamed: (reply) => reply.turn !== undefined && streamed.delete(`${reply.session}#${reply.turn}`)
  }
}
