/**
 * The cluster benchmark's latency breakdown (`CLUSTER_BENCH_TIMING=1`): the runners record each step of a
 * message's path (src/cluster/Timing.ts) and this reads them back for the one-at-a-time samples (sessions
 * `lat*` on runners just started, `wl*` on warm ones), step by step, the median of each over the samples.
 */
import * as fs from "node:fs"

interface Mark {
  readonly t: number
  readonly pid: number
  readonly id: string
  readonly point: string
}

/** From one mark to the next, in the order a message reaches them, and what happens in between. */
const STEPS: ReadonlyArray<readonly [from: string, to: string, what: string]> = [
  ["clientSent", "httpIn", "the bench's `fetch` -> the ingress's node:http server has the request (loopback)"],
  ["httpIn", "ingress", "effect/http-api: route, body and query decoded -> the message handler"],
  ["ingress", "slotDone", "`switchyard_coalesce_slot` (slot + inbox row), on the ingress runner"],
  ["slotDone", "save0", "effect/cluster's client until its save starts"],
  ["save0", "save1", "the save: `INSERT INTO cluster_messages`"],
  ["save1", "read0", "saved -> the key's runner starts its read (notified: a latch, or a socket hop)"],
  ["read0", "read1", "the read: `UPDATE cluster_messages SET last_read ... RETURNING`"],
  ["read1", "onRun", "entity manager -> mailbox -> KeyRunner"],
  ["slotDone", "onRun", "a volatile RunNow to the key's runner -> mailbox -> KeyRunner (no save, no read)"],
  ["slotDone", "hopSent", "  the hop (Hop.ts): the send's fibers -> the POST to the owner's ingress starts"],
  ["hopSent", "relayArrived", "  the hop: the POST written -> the owner's node:http server has it (loopback, wake-up)"],
  ["relayArrived", "relayDecoded", "  the hop: the owner reads the body, JSON.parse + Schema decode of the RunNow"],
  ["relayDecoded", "onRun", "  the hop: the owner's relay -> the local way -> KeyRunner"],
  ["onRun", "taskStart", "admission into the runner's CommandQueue"],
  ["taskStart", "turnStarted", "`switchyard_turn_start` (slot started, inbox rows, history)"],
  ["turnStarted", "modelDone", "the model (scripted)"],
  ["modelDone", "commit0", "until the commit starts (persisted: effect/cluster's reply path)"],
  ["commit0", "commit1", "the fenced commit (one statement; persisted: with effect/cluster's reply)"],
  ["commit1", "replied", "the reply back to the dispatcher (local, or a socket hop)"],
  ["commit1", "relayAnswered", "  the hop back: the turn's end -> the owner's relay has the answer"],
  [
    "relayAnswered",
    "hopAnswered",
    "  the hop back: the answer encoded, written -> read by the ingress (loopback, wake-up)"
  ],
  ["hopAnswered", "replied", "  the hop back: the ingress's send -> the dispatcher's future"],
  ["replied", "respond", "future settled -> HTTP response"],
  ["respond", "httpOut", "effect/http-api: the response encoded, until its `end`"],
  ["httpOut", "clientGot", "the response written -> the bench's `fetch` has the body (loopback)"]
]

/** Marks keyed by the session (the run id is not known yet, or no more): the client's and the HTTP server's. */
const BEFORE = ["clientSent", "httpIn"] as const
const AFTER = ["httpOut", "clientGot"] as const

const median = (xs: ReadonlyArray<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length === 0 ? NaN : s[Math.floor(s.length / 2)]!
}

/**
 * The steps of the one-at-a-time messages recorded in `file` to sessions named `<prefix><n>`: for each, the
 * median time (ms), how many samples had it, and the median of the whole path (ingress to response).
 */
export const breakdown = (file: string, prefix = "lat") => {
  const marks: Array<Mark> = fs.readFileSync(file, "utf8").split("\n").filter((l) => l.length > 0).map((l) =>
    JSON.parse(l) as Mark
  )
  // The ingress marks the session (the run id is not known yet); its run is the next one the slot gave.
  const byRun = new Map<string, Map<string, number>>()
  // The process each run reached each point in: a run whose ingress is not its key's runner crossed over.
  const pidOf = new Map<string, Map<string, number>>()
  const ingress = marks.filter((m) => m.point === "ingress" && m.id.startsWith(prefix)).sort((a, b) => a.t - b.t)
  const slots = marks.filter((m) => m.point === "slotDone").sort((a, b) => a.t - b.t)
  // The session's marks around its run: the last of each point before the ingress's mark, the first after
  // the response.
  const bySession = new Map<string, Array<Mark>>()
  for (const m of marks) {
    if ((BEFORE as ReadonlyArray<string>).includes(m.point) || (AFTER as ReadonlyArray<string>).includes(m.point)) {
      const list = bySession.get(m.id) ?? []
      list.push(m)
      bySession.set(m.id, list)
    }
  }
  const sessionOf = new Map<string, { readonly session: string; readonly ingress: Mark }>()
  for (const m of ingress) {
    const slot = slots.find((s) => s.t >= m.t && s.pid === m.pid && s.id.includes(`:${m.id}:`))
    if (slot !== undefined) {
      byRun.set(slot.id, new Map([["ingress", m.t]]))
      sessionOf.set(slot.id, { session: m.id, ingress: m })
    }
  }
  for (const m of marks) {
    const points = byRun.get(m.id)
    if (points !== undefined && !points.has(m.point)) {
      points.set(m.point, m.t)
      const pids = pidOf.get(m.id) ?? new Map<string, number>()
      pids.set(m.point, m.pid)
      pidOf.set(m.id, pids)
    }
  }
  for (const [run, { ingress: m, session }] of sessionOf) {
    const points = byRun.get(run)!
    const list = bySession.get(session) ?? []
    let before = m.t
    for (const point of [...BEFORE].reverse()) {
      const hit = list.filter((x) => x.point === point && x.t <= before).sort((a, b) => b.t - a.t)[0]
      if (hit === undefined) break
      points.set(point, hit.t)
      before = hit.t
    }
    let after = points.get("respond")
    for (const point of AFTER) {
      if (after === undefined) break
      const from = after
      const hit = list.filter((x) => x.point === point && x.t >= from).sort((a, b) => a.t - b.t)[0]
      if (hit === undefined) break
      points.set(point, hit.t)
      after = hit.t
    }
  }
  const rowOf = (from: string, to: string, what: string, only?: (remote: boolean) => boolean) => {
    const ds: Array<number> = []
    for (const [run, points] of byRun) {
      const a = points.get(from)
      const b = points.get(to)
      const pids = pidOf.get(run)
      if (only !== undefined && !only(pids?.get("slotDone") !== pids?.get("onRun"))) continue
      if (a !== undefined && b !== undefined) ds.push(b - a)
    }
    return { what, ms: median(ds), samples: ds.length }
  }
  const rows = STEPS.flatMap(([from, to, what]) =>
    (from === "slotDone" && to === "onRun") || (from === "commit1" && to === "replied")
      ? [
        rowOf(from, to, what),
        rowOf(from, to, `  of these, the key's runner is the ingress`, (remote) => !remote),
        rowOf(from, to, `  of these, the key's runner is another`, (remote) => remote)
      ]
      : [rowOf(from, to, what)]
  )
  const totalOf = (from: string, to: string) =>
    [...byRun.values()].flatMap((p) => {
      const a = p.get(from)
      const b = p.get(to)
      return a !== undefined && b !== undefined ? [b - a] : []
    })
  const totals = totalOf("ingress", "respond")
  // A path the samples did not take (persisted or volatile) has no samples.
  return {
    rows: rows.filter((r) => r.samples > 0),
    total: median(totals),
    /** From the client's send to its reply, where the client marked. */
    client: median(totalOf("clientSent", "clientGot")),
    samples: totals.length
  }
}
