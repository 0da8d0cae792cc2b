/** The chatbot's line for a model call the SDK tries again (examples/chatbot/output.ts). */
import { describe, expect, it } from "vitest"
import { modelRetryLine } from "../../examples/chatbot/output.js"
import type { AgentEvent } from "../../src/agent/index.js"

type ModelRetryEvent = Extract<AgentEvent, { readonly type: "model-retry" }>

const event = (fields: Partial<ModelRetryEvent>): ModelRetryEvent => ({
  type: "model-retry",
  kind: "user",
  session: "local",
  turn: 1,
  reason: "rate-limit",
  status: 429,
  retry: 1,
  maxRetries: 2,
  ...fields
})

describe("modelRetryLine", () => {
  it("names the status, why, when the next try goes and which retry it is", () => {
    expect(modelRetryLine(event({ retryInMs: 20_000 }), "local")).toBe(
      "the model answered 429 (rate limited): trying again in 20 s (retry 1 of 2)"
    )
    expect(modelRetryLine(event({ reason: "overloaded", status: 529, retry: 2 }), "local")).toBe(
      "the model answered 529 (overloaded): trying again in a moment (retry 2 of 2)"
    )
    expect(modelRetryLine(event({ reason: "unknown", status: 500, retryInMs: 300 }), "local")).toBe(
      "the model answered 500: trying again in under a second (retry 1 of 2)"
    )
  })

  it("a try with no answer, and another session's retry, say so", () => {
    const { status: _status, ...network } = event({ reason: "network" })
    expect(modelRetryLine({ ...network, session: "cron-1" }, "local")).toBe(
      "the model could not be reached for session cron-1: trying again in a moment (retry 1 of 2)"
    )
  })
})
