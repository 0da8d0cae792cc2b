import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { IDLE, QUEUED, RUNNING } from "../../src/queue/lanes/entry.js"
import {
  ALONE,
  BURST_HELD,
  DEAD_PER_HELD,
  hashOf,
  KeyTable,
  type Renumbered,
  renumbered,
  SWEEP_SLACK
} from "../../src/queue/lanes/keyTable.js"

/** Takes `key` up as the lanes do: its IDLE entry if the table has one, else a new one. */
const take = <K>(table: KeyTable<K>, key: K) => {
  const e = table.acquire(key, table.get(key))
  e.state = RUNNING
  return e
}

describe("KeyTable (the lanes' keys)", () => {
  it("finds every string key again after the table has grown many times, and misses keys it never had", () => {
    const table = new KeyTable<string>(undefined)
    const entries = Array.from({ length: 100_000 }, (_, i) => take(table, `room:${i}`))
    expect(table.held).toBe(100_000)
    for (let i = 0; i < 100_000; i += 997) expect(table.lookup(`room:${i}`)).toBe(entries[i])
    for (let i = 0; i < 100; i++) expect(table.get(`room:${100_000 + i}`)).toBeUndefined()
    expect(table.get("")).toBeUndefined()
    expect(new Set(table.values()).size).toBe(100_000)
  })

  it("two keys of one hash are two keys", () => {
    const seen = new Map<number, string>()
    let pair: [string, string] | undefined
    for (let i = 0; pair === undefined; i++) {
      const key = `c${i}`
      const other = seen.get(hashOf(key))
      if (other !== undefined) pair = [other, key]
      else seen.set(hashOf(key), key)
    }
    const [x, y] = pair
    expect(hashOf(x)).toBe(hashOf(y))
    const table = new KeyTable<string>(undefined)
    const ex = take(table, x)
    expect(table.get(y)).toBeUndefined()
    const ey = take(table, y)
    expect(ey).not.toBe(ex)
    expect(table.lookup(x)).toBe(ex)
    expect(table.lookup(y)).toBe(ey)
  })

  it("keeps keys of other types apart from strings (SameValueZero, as a Map)", () => {
    const table = new KeyTable<unknown>(undefined)
    const obj = {}
    const keys: Array<unknown> = ["1", 1, obj, NaN, 0, "", undefined]
    const entries = keys.map((k) => take(table, k))
    expect(table.lookup(1)).toBe(entries[1])
    expect(table.lookup("1")).toBe(entries[0])
    expect(table.lookup(obj)).toBe(entries[2])
    expect(table.lookup({})).toBeUndefined()
    expect(table.lookup(NaN)).toBe(entries[3])
    expect(table.lookup(-0)).toBe(entries[4])
    expect(table.lookup("")).toBe(entries[5])
    expect(table.lookup(undefined)).toBe(entries[6])
    expect(table.held).toBe(keys.length)
  })

  it("a released key's entry is taken up again when the key comes back (no new entry)", () => {
    const table = new KeyTable<string>(undefined)
    const a = take(table, "a")
    take(table, "b")
    table.release(a)
    expect(a.state).toBe(IDLE)
    expect(table.lookup("a")).toBeUndefined()
    expect(table.get("a")).toBe(a)
    expect(take(table, "a")).toBe(a)
    expect(table.held).toBe(2)
    expect(table.size).toBe(2)
  })

  it("once no key is held, the table holds nothing", () => {
    const table = new KeyTable<unknown>(undefined)
    const entries = [...Array.from({ length: 5_000 }, (_, i) => take(table, `k${i}`)), take(table, 7)]
    for (const e of entries) table.release(e)
    expect(table.held).toBe(0)
    expect(table.size).toBe(0)
    expect([...table.values()]).toEqual([])
    expect(table.get("k1")).toBeUndefined()
  })

  it("idle entries stay bounded by the held keys: a new key sweeps them past held + SWEEP_SLACK", () => {
    const table = new KeyTable<string>(undefined)
    const keep = take(table, "keep")
    for (let i = 0; i < 3 * SWEEP_SLACK; i++) table.release(take(table, `gone-${i}`))
    expect(table.lookup("keep")).toBe(keep)
    expect(table.held).toBe(1)
    expect(table.size).toBeLessThanOrEqual(1 + 1 + SWEEP_SLACK + 1)
  })

  it("without new keys, releases sweep idle entries past DEAD_PER_HELD per held key + SWEEP_SLACK", () => {
    const table = new KeyTable<string>(undefined)
    const burst = Array.from({ length: 20_000 }, (_, i) => take(table, `burst-${i}`))
    for (let i = 0; i < burst.length - 10; i++) table.release(burst[i]!)
    expect(table.held).toBe(10)
    expect(table.size).toBeLessThanOrEqual(10 + 10 * DEAD_PER_HELD + SWEEP_SLACK)
    for (let i = burst.length - 10; i < burst.length; i++) expect(table.lookup(`burst-${i}`)).toBe(burst[i])
  })

  it("past BURST_HELD held keys a released entry goes (a tombstone): it dies young, and its key comes back as a new one", () => {
    const table = new KeyTable<string>(undefined)
    const burst = Array.from({ length: BURST_HELD + 10 }, (_, i) => take(table, `burst-${i}`))
    const gone = burst[5]!
    table.release(gone)
    expect(table.get("burst-5")).toBeUndefined()
    expect([...table.values()]).not.toContain(gone)
    const back = take(table, "burst-5")
    expect(back).not.toBe(gone)
    expect(table.lookup("burst-5")).toBe(back)
    expect(table.held).toBe(BURST_HELD + 10)
    // below it, a released entry stays IDLE and is taken up again
    for (let i = 0; i < 20; i++) if (i !== 5) table.release(burst[i]!)
    const idle = burst[BURST_HELD + 9]!
    table.release(idle)
    expect(table.get(`burst-${BURST_HELD + 9}`)).toBe(idle)
  })

  it("keys held without an entry: found by key, made into entries when looked up or taken off the queue by record", () => {
    const moves: Array<Renumbered> = []
    const table = new KeyTable<string>(undefined, 2, (moved) => moves.push(moved))
    const [ra, rb, rc] = ["a", "b", "c"].map((k) => table.acquireAlone(k))
    expect(table.held).toBe(3)
    expect(table.peek("a")).toBe(ALONE)
    expect(table.aloneAt(rb!)).toBe("b")
    expect([...table.values()]).toEqual([])
    // looked up: an entry, QUEUED, naming its record
    const b = table.get("b")!
    expect(b.state).toBe(QUEUED)
    expect(b.seq).toBe(-(rb! + 1))
    expect(table.peek("b")).toBe(b)
    expect(table.aloneAt(rb!)).toBe("b")
    // taken off the queue by record: its entry (made now if it had none)
    const a = table.takeUp(ra!)!
    expect(a.key).toBe("a")
    expect(table.get("a")).toBe(a)
    expect(table.takeUp(rb!)).toBe(b)
    a.state = RUNNING
    b.state = RUNNING
    // a record whose entry left the queue is a stale place
    expect(table.takeUp(ra!)).toBeUndefined()
    expect(table.aloneAt(ra!)).toBeUndefined()
    expect(table.held).toBe(3)
    // a sweep renumbers the records: told how, keys alone included
    const idle = Array.from({ length: 8 }, (_, i) => take(table, `idle-${i}`))
    for (const e of idle) table.release(e)
    take(table, "new")
    expect(moves.length).toBeGreaterThan(0)
    const c = renumbered(moves[moves.length - 1]!, rc!)
    expect(table.aloneAt(c)).toBe("c")
    expect(renumbered(moves[moves.length - 1]!, ra!)).toBe(-1) // an entry's record: not a key alone's
    expect(table.takeUp(c)!.key).toBe("c")
  })

  it("shared with the engine, an entry leaves the map once neither side holds it", () => {
    const map = new Map()
    const engineHolds = new Set<string>()
    const table = new KeyTable<string>({
      map,
      make: (key) => ({ key, state: IDLE } as never),
      keep: (e) => engineHolds.has(e.key)
    })
    const a = take(table, "a")
    const b = take(table, "b")
    engineHolds.add("a")
    table.release(a)
    table.release(b)
    expect(map.has("a")).toBe(true) // the engine still holds it: it stays, IDLE
    expect(map.has("b")).toBe(false)
    expect(take(table, "a")).toBe(a)
  })
})

describe("KeyTable against a Map model", () => {
  type Op = { readonly op: "wake" | "release"; readonly key: string } | { readonly op: "releaseAll" }
  // few distinct keys (so that they come back), some long, some sharing a hash bucket often
  const key = fc.oneof(
    fc.integer({ min: 0, max: 40 }).map((i) => `k${i}`),
    fc.integer({ min: 0, max: 5 }).map((i) => `session:${"x".repeat(i * 17)}:${i}`)
  )
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 6, arbitrary: key.map((k) => ({ op: "wake" as const, key: k })) },
    { weight: 4, arbitrary: key.map((k) => ({ op: "release" as const, key: k })) },
    { weight: 1, arbitrary: fc.constant({ op: "releaseAll" as const }) }
  )

  it("holds exactly the keys taken and not released, finds each held key's own entry, and stays bounded", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 300 }), (ops) => {
        // a slack of 2: the sweeps run all the time
        const table = new KeyTable<string>(undefined, 2)
        const model = new Map<string, ReturnType<typeof take<string>>>()
        const release = (k: string) => {
          const e = model.get(k)
          if (e === undefined) return
          model.delete(k)
          table.release(e)
        }
        for (const o of ops) {
          if (o.op === "wake") {
            if (!model.has(o.key)) model.set(o.key, take(table, o.key))
          } else if (o.op === "release") release(o.key)
          else for (const k of [...model.keys()]) release(k)
          expect(table.held).toBe(model.size)
          for (const [k, e] of model) expect(table.lookup(k)).toBe(e)
          for (let i = 0; i <= 40; i++) if (!model.has(`k${i}`)) expect(table.lookup(`k${i}`)).toBeUndefined()
          expect(table.size).toBeLessThanOrEqual(model.size * (DEAD_PER_HELD + 1) + 2 + 1)
          if (model.size === 0) expect(table.size).toBe(0)
          const held = [...table.values()].filter((e) => e.state !== IDLE)
          expect(new Set(held)).toEqual(new Set(model.values()))
        }
      }),
      { numRuns: 300 }
    )
  })
})
