import { describe, expect, it } from "vitest"
import { AdmissionError, LanesConfigInvalid, MAX_QUEUED, QueueFailure } from "../../src/queue/index.js"

describe("queue errors", () => {
  it("are tagged Error values whose message says what happened", () => {
    const invalid = new LanesConfigInvalid({
      field: "maxConcurrent",
      message: "Expected `maxConcurrent` to be an integer from 1 and up, got `0`"
    })
    expect(invalid).toBeInstanceOf(Error)
    expect(invalid._tag).toBe("LanesConfigInvalid")
    expect(invalid.message).toContain("got `0`")
    const full = new AdmissionError({ lane: "main", key: "k", reason: "full" })
    expect(full.message).toContain("`main` is full")
    const failure = new QueueFailure({
      runId: "r1",
      lane: "main",
      key: "k",
      participation: "blocking",
      stage: "queued",
      reason: "stale"
    })
    expect(failure.message).toBe("Task r1 (lane `main`) failed while queued: stale")
    expect(MAX_QUEUED).toBe(10_000)
  })
})
