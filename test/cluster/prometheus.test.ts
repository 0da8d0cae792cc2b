/** The test's Prometheus reader refuses what a scraper would: so the /metrics test can fail. */
import { describe, expect, it } from "vitest"
import { parsePrometheus } from "./prometheus.js"

describe("parsePrometheus", () => {
  it("reads families with HELP, TYPE and labelled samples", () => {
    const f = parsePrometheus(`# HELP a_total Things.\n# TYPE a_total counter\na_total{x="1",r="q\\"uote"} 3\n`)
    expect(f.get("a_total")).toEqual({
      help: "Things.",
      type: "counter",
      samples: new Map([[`{r="q\\"uote",x="1"}`, 3]])
    })
  })
  it.each([
    ["a sample without HELP and TYPE", "a 1\n"],
    ["a missing TYPE", "# HELP a x\na 1\n"],
    ["a bad value", "# HELP a x\n# TYPE a gauge\na abc\n"],
    ["an unquoted label", "# HELP a x\n# TYPE a gauge\na{x=1} 1\n"],
    ["a series twice", "# HELP a x\n# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n"],
    ["no final line feed", "# HELP a x\n# TYPE a gauge\na 1"],
    ["a bad type", "# HELP a x\n# TYPE a thing\na 1\n"]
  ])("refuses %s", (_, text) => {
    expect(() => parsePrometheus(text)).toThrow()
  })
})
