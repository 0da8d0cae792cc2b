/**
 * The ingress's short way to a key's owner (src/cluster/Hop.ts): two runner processes; a message sent to
 * the runner that does not hold its session's shard is answered by the owner's turn through the owner's
 * ingress (the hop: one upgraded connection, `GET /internal/hop`, HopWire.ts), and, when that ingress cannot
 * be reached, the usual way (effect/cluster's socket), each message answered once.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { freshDatabase, postgresAvailable, query } from "./pg.js"
import { postMessage, shardsSettled, startRunner, status, tearDown, until } from "./support.js"
import type { RunnerProcess } from "./support.js"

const up = await postgresAvailable("test/cluster/Hop.test.ts")
const SHARDS = 8

describe.skipIf(!up)("the short way to a key's owner (two runner processes)", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  const runners: Array<RunnerProcess> = []
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-hop-"))
  const outbox = path.join(dir, "outbox.jsonl")

  beforeAll(async () => {
    db = await freshDatabase("hop")
    const args = ["--shards", String(SHARDS), "--latency", "20"]
    runners.push(
      ...await Promise.all([startRunner({ url: db.url, outbox, args }), startRunner({ url: db.url, outbox, args })])
    )
    await shardsSettled(runners.map((r) => r.port), SHARDS)
  }, 90_000)

  afterAll(async () => {
    await tearDown(runners, db, dir)
  }, 60_000)

  const forwarded = async (r: RunnerProcess) => (await status(r.port)).counters.forwarded ?? 0
  const local = async (r: RunnerProcess) => (await status(r.port)).counters.local ?? 0

  it(
    "a message to the runner that does not own its session goes to the owner's ingress and is answered there, the local way (as the owner's own messages); with that ingress unreachable it goes the usual way; each answered once",
    async () => {
      const [ingress, owner] = runners
      // Both runners know where the other's ingress is, and which shards it holds (read once a second).
      await until("the runners' ingress URLs", 10_000, async () =>
        Number(
          (await query<{ n: number }>(db!.url, `SELECT count(*)::float8 AS n FROM switchyard_ingress_owners`))[0].n
        ) === 2)
      // Sessions of the owner's shards, found by where their turns run.
      const theirs: Array<string> = []
      for (let i = 0; theirs.length < 3 && i < 40; i++) {
        const r = await postMessage(owner.port, `hop${i}`, "find", 30_000)
        expect(r.status).toBe(200)
        if (r.body.reply?.turnRunner === owner.name) theirs.push(`hop${i}`)
      }
      expect(theirs.length).toBe(3)
      // The ingress reads where shards are once a second: until then (or until it read them after the owner took
      // the shards of all three sessions) a message goes the usual way.
      for (const session of theirs) {
        await until("the ingress to learn the owner's shards", 10_000, async () => {
          const before = await forwarded(ingress)
          const r = await postMessage(ingress.port, session, "learn", 30_000)
          expect([r.status, r.body.reply?.turnRunner]).toEqual([200, owner.name])
          return (await forwarded(ingress)) > before
        })
      }
      const before = await forwarded(ingress)
      const ownerLocal = await local(owner)
      for (const session of theirs) {
        const r = await postMessage(ingress.port, session, "short", 30_000)
        expect([r.status, r.body.reply?.text, r.body.reply?.turnRunner]).toEqual([200, "You said: short", owner.name])
      }
      expect((await forwarded(ingress)) - before).toBe(theirs.length)
      // On the owner each forwarded run went the local way (no effect/cluster send), as its own messages do.
      expect((await local(owner)) - ownerLocal).toBe(theirs.length)
      const direct = await postMessage(owner.port, theirs[0], "to the owner", 30_000)
      expect([direct.status, direct.body.reply?.turnRunner]).toEqual([200, owner.name])
      expect((await local(owner)) - ownerLocal).toBe(theirs.length + 1)

      // The owner's ingress unreachable (its registration points nowhere): answered the usual way.
      await query(db!.url, `UPDATE switchyard_ingress_owners SET url = 'http://127.0.0.1:1' WHERE url LIKE $1`, [
        `%:${owner.port}`
      ])
      await until("a message answered the usual way", 10_000, async () => {
        const at = await forwarded(ingress)
        const r = await postMessage(ingress.port, theirs[1], "usual", 30_000)
        expect([r.status, r.body.reply?.turnRunner]).toEqual([200, owner.name])
        return (await forwarded(ingress)) === at
      })
      const r = await postMessage(ingress.port, theirs[2], "usual again", 30_000)
      expect([r.status, r.body.reply?.text]).toEqual([200, "You said: usual again"])

      // Every message answered once: one turn and one outbox entry per run.
      const twice = await query(
        db!.url,
        `SELECT run_id FROM switchyard_turns GROUP BY run_id HAVING count(*) > 1
       UNION ALL SELECT idempotency_key FROM switchyard_outbox GROUP BY idempotency_key HAVING count(*) > 1`
      )
      expect(twice).toEqual([])
      const unanswered = await query(db!.url, `SELECT run_id FROM switchyard_inbox WHERE answer IS NULL`)
      expect(unanswered).toEqual([])
    },
    90_000
  )
})
