/** Strict JSON checks for what crosses processes (outbox bodies, commands): no silent loss in `JSON.stringify`. */

/** Why a value is not JSON, or `undefined` when it is. `path` names where, e.g. `body.items[2]`. */
export const notJson = (value: unknown, path: string): string | undefined => {
  const ancestors = new Set<object>()
  const check = (v: unknown, at: string): string | undefined => {
    switch (typeof v) {
      case "string":
      case "boolean":
        return undefined
      case "number":
        return Number.isFinite(v) ? undefined : `\`${at}\` is ${String(v)}, which JSON cannot hold`
      case "undefined":
        return `\`${at}\` is undefined`
      case "bigint":
        return `\`${at}\` is a BigInt; send it as a string`
      case "function":
      case "symbol":
        return `\`${at}\` is a ${typeof v}`
    }
    if (v === null) return undefined
    const o = v as object
    if (ancestors.has(o)) return `\`${at}\` is circular (it contains itself); send a tree`
    if (typeof (o as { toJSON?: unknown }).toJSON === "function") return undefined
    ancestors.add(o)
    try {
      if (Array.isArray(o)) {
        for (let i = 0; i < o.length; i++) {
          const bad = check(o[i], `${at}[${i}]`)
          if (bad) return bad
        }
        return undefined
      }
      for (const [k, x] of Object.entries(o)) {
        const bad = check(x, `${at}.${k}`)
        if (bad) return bad
      }
      return undefined
    } finally {
      ancestors.delete(o)
    }
  }
  return check(value, path)
}
