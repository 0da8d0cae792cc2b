/**
 * What the chatbot prints. With `--json` standard output carries only JSON lines (one per event);
 * otherwise replies are printed as text, and in a terminal (the `Screen`) a turn shows "…thinking"
 * and its reply streams as it arrives. Errors always go to standard error, one line each.
 */
import * as tty from "node:tty"
import { type AgentEvent, describeModelRetry, type ReplyBody } from "../../src/agent/index.js"
import type { Screen } from "./screen.js"

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
  /** Agent events (progress and streaming in a terminal). */
  readonly onAgentEvent: (event: AgentEvent) => void
  /** Whether the reply with this body was already shown as it streamed (so the delivery prints nothing more). */
  readonly wasStreamed: (reply: ReplyBody) => boolean
  /** The output is a terminal that hung up (its window closed): what is printed now reaches nobody. */
  readonly terminalGone: () => boolean
}

/** The line for a model call that failed and is tried again, e.g. `the model answered 429 (rate limited): trying again in 20 s (retry 1 of 2)`. */
export const modelRetryLine = (
  event: Extract<AgentEvent, { readonly type: "model-retry" }>,
  chatSession: string
): string => describeModelRetry(event, event.session === chatSession ? undefined : event.session)

/** Makes the output; `screen` is given when standard output is a terminal (and not `--json`). */
export const makeOutput = (
  options: { readonly json: boolean; readonly screen?: Screen; readonly session: string }
): Output => {
  const { json, screen } = options
  const line = (to: "out" | "err", text: string) => {
    if (screen !== undefined) screen.print(text, to)
    else void (to === "out" ? process.stdout : process.stderr).write(text + "\n")
  }
  const streamed = new Set<string>()
  let streaming: string | undefined

  const endStream = () => {
    if (streaming === undefined) return
    streaming = undefined
    screen?.endStream()
  }

  const onAgentEvent = (event: AgentEvent) => {
    if (event.type === "model-retry" && event.kind === "user") {
      // The turn goes on, slower: say why (a retry-after can be tens of seconds), and keep the
      // thinking sign, which printing a line clears.
      if (!json) line("err", modelRetryLine(event, options.session))
      if (screen !== undefined && event.session === options.session && streaming === undefined) screen.thinking(true)
      return
    }
    if (screen === undefined) return
    if (event.type === "turn-started" && event.kind === "user" && event.session === options.session) {
      screen.thinking(true)
    } else if (event.type === "text" && event.kind === "user" && event.session === options.session) {
      const key = `${event.session}#${event.turn}`
      if (streaming !== key) {
        endStream()
        streaming = key
        streamed.add(key)
      }
      screen.stream(event.chunk)
    } else if ((event.type === "turn-ended" || event.type === "turn-failed") && event.session === options.session) {
      endStream()
      screen.thinking(false)
    }
  }

  return {
    json,
    event: (value) => {
      if (json) process.stdout.write(JSON.stringify(value) + "\n")
    },
    say: (text) => {
      if (!json) line("out", text)
    },
    note: (text) => {
      if (!json) line("err", text)
    },
    error: (text) => line("err", text),
    onAgentEvent,
    wasStreamed: (reply) => reply.turn !== undefined && streamed.delete(`${reply.session}#${reply.turn}`),
    // a hung-up terminal answers EIO to the isatty ioctl (it was one when the screen was made)
    terminalGone: () => screen !== undefined && !tty.isatty(1)
  }
}
