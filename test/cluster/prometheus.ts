/**
 * A strict reader of the Prometheus text exposition format (0.0.4), for the tests: every sample must
 * belong to a family announced by `# HELP` and `# TYPE` before it, names and labels must be valid,
 * values numbers, and no series may appear twice. Throws on the first line that breaks a rule.
 */
export interface Family {
  readonly help: string
  readonly type: "counter" | "gauge" | "histogram" | "summary" | "untyped"
  /** Value by label set, written `{a="1",b="2"}` with the labels sorted (`{}` for none). */
  readonly samples: Map<string, number>
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$/
const LABEL = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(?:,|$)/

export const parsePrometheus = (text: string): Map<string, Family> => {
  interface Partial {
    help?: string
    type?: Family["type"]
    samples: Map<string, number>
  }
  const families = new Map<string, Partial>()
  const lines = text.split("\n")
  if (lines.pop() !== "") throw new Error("Expected the text to end with a line feed")
  lines.forEach((line, i) => {
    const where = `line ${i + 1} \`${line}\``
    if (line.startsWith("# HELP ") || line.startsWith("# TYPE ")) {
      const [, kind, name, ...rest] = line.split(" ")
      if (!NAME.test(name)) throw new Error(`${where}: bad metric name`)
      const f: Partial = families.get(name) ?? { samples: new Map() }
      if (f.samples.size > 0) throw new Error(`${where}: ${kind} after samples of ${name}`)
      if (kind === "HELP") {
        if (f.help !== undefined) throw new Error(`${where}: second HELP`)
        f.help = rest.join(" ")
      } else {
        const type = rest.join(" ")
        if (f.type !== undefined) throw new Error(`${where}: second TYPE`)
        if (!["counter", "gauge", "histogram", "summary", "untyped"].includes(type)) {
          throw new Error(`${where}: bad type`)
        }
        f.type = type as Family["type"]
      }
      families.set(name, f)
      return
    }
    if (line.startsWith("#") || line === "") {
      throw new Error(`${where}: comments other than HELP and TYPE, or blank lines, are not expected here`)
    }
    const m = SAMPLE.exec(line)
    if (m === null) throw new Error(`${where}: not a sample`)
    const [, name, rawLabels = "", rawValue] = m
    const f = families.get(name)
    if (f?.help === undefined || f.type === undefined) throw new Error(`${where}: sample before its HELP and TYPE`)
    const labels: Array<string> = []
    let rest = rawLabels
    while (rest.length > 0) {
      const l = LABEL.exec(rest)
      if (l === null) throw new Error(`${where}: bad labels \`${rest}\``)
      labels.push(`${l[1]}="${l[2]}"`)
      rest = rest.slice(l[0].length)
    }
    const value = rawValue === "+Inf" ? Infinity : rawValue === "-Inf" ? -Infinity : Number(rawValue)
    if (rawValue !== "NaN" && Number.isNaN(value)) throw new Error(`${where}: bad value`)
    const key = `{${labels.sort().join(",")}}`
    if (f.samples.has(key)) throw new Error(`${where}: the series ${name}${key} appears twice`)
    f.samples.set(key, value)
  })
  const out = new Map<string, Family>()
  for (const [name, f] of families) {
    if (f.help === undefined || f.type === undefined) {
      throw new Error(`${name}: HELP and TYPE expected, got ${f.help === undefined ? "no HELP" : "no TYPE"}`)
    }
    out.set(name, { help: f.help, type: f.type, samples: f.samples })
  }
  return out
}
