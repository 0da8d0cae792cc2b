/**
 * The statements a message goes through (docs/cluster.md "What a message costs"), each on its own
 * against Postgres: the coalescing slot with its inbox row, the turn's start (slot marked, then its
 * inbox rows read, after waiting for the slot's lock), and the turn's writes committed with its run's
 * reply in one statement fenced by the shard's epoch.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Exit, Fiber, Layer } from "effect"
import { SqlClient } from "effect/sql"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Model } from "../../src/agent/Model.js"
import * as ScriptedModel from "../../src/agent/ScriptedModel.js"
import * as Answers from "../../src/cluster/Answers.js"
import * as ClusterAgent from "../../src/cluster/ClusterAgent.js"
import type { ClusterTask } from "../../src/cluster/LaneHandler.js"
import * as Migrations from "../../src/cluster/Migrations.js"
import * as PgDeliveryLog from "../../src/cluster/PgDeliveryLog.js"
import * as Postgres from "../../src/cluster/Postgres.js"
import type { ReplyCommit } from "../../src/cluster/Storage.js"
import { captureLogs } from "../queue/CommandQueue.helpers.js"
import { freshDatabase, postgresAvailable } from "./pg.js"

const up = await postgresAvailable("test/cluster/Messages.test.ts")

describe.skipIf(!up)("the statements of a message (Postgres)", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  const query = <A extends object>(text: string, params: ReadonlyArray<unknown> = []) =>
    Effect.runPromise(Postgres.withClient(db!.url, (sql) => sql.unsafe<A>(text, params)))

  beforeAll(async () => {
    db = await freshDatabase("messages")
    await Effect.runPromise(
      Postgres.withClient(db.url, (sql) => Migrations.migrate().pipe(Effect.provideService(SqlClient.SqlClient, sql)))
    )
  }, 30_000)
  afterAll(async () => {
    await db?.drop()
  })

  it("coalesce_slot: opens a slot and records the message for its run; joins it until it starts; a recorded message id joins its run", async () => {
    const slot = (session: string, messageId: string | null, text: string) =>
      query<{ slot: number | null; joined: boolean; run_id: string }>(
        `SELECT out_slot::float8 AS slot, out_joined AS joined, out_run_id AS run_id FROM switchyard_coalesce_slot('main', $1, $1, $2, $3, 0)`,
        [session, messageId, text]
      ).then((rows) => rows[0])
    expect(await slot("cs", "a", "one")).toEqual({ slot: 1, joined: false, run_id: "coalesce:main:cs:1" })
    expect(await slot("cs", null, "two")).toEqual({ slot: 1, joined: true, run_id: "coalesce:main:cs:1" })
    await query(`SELECT * FROM switchyard_turn_start('main', 'cs', 1, 'coalesce:main:cs:1', 'cs', 10)`)
    expect(await slot("cs", "b", "three")).toEqual({ slot: 2, joined: false, run_id: "coalesce:main:cs:2" })
    // "a" again (a client's retry): the run it was recorded for, nothing recorded twice
    expect(await slot("cs", "a", "one")).toEqual({ slot: null, joined: true, run_id: "coalesce:main:cs:1" })
    const inbox = await query<{ text: string; run_id: string }>(
      `SELECT text, run_id FROM switchyard_inbox WHERE session = 'cs' ORDER BY id`
    )
    expect(inbox).toEqual([
      { text: "one", run_id: "coalesce:main:cs:1" },
      { text: "two", run_id: "coalesce:main:cs:1" },
      { text: "three", run_id: "coalesce:main:cs:2" }
    ])
  })

  it("coalesce_slot_start: an idle session's slot opens started and returns its history (oldest first, at most the rows asked); with a run of the session unanswered it opens the slot unstarted without history, and the next message joins it; a recorded message id joins its run", async () => {
    const slot = (text: string, messageId: string | null = null, history = 40) =>
      query<{ slot: number | null; joined: boolean; run_id: string; history: string | null }>(
        `SELECT out_slot::float8 AS slot, out_joined AS joined, out_run_id AS run_id, out_history AS history
         FROM switchyard_coalesce_slot_start('main', 'ss', 'ss', $1, $2, 0, 'default:9', 0, $3)`,
        [messageId, text, history]
      ).then((rows) => ({ ...rows[0], history: rows[0].history === null ? null : JSON.parse(rows[0].history) }))
    const started = () =>
      query<{ slot: number; started: boolean }>(
        `SELECT slot::float8 AS slot, started FROM switchyard_coalesce WHERE lane = 'main' AND key = 'ss'`
      ).then((rows) => rows.map((r) => ({ slot: Number(r.slot), started: r.started })))
    /** What the turn of `run` commits: its exchange and its answer (ClusterAgent.ts). */
    const commit = (run: string, user: string) =>
      query(
        `WITH t AS (INSERT INTO switchyard_transcripts (session, run_id, role, content, part)
           VALUES ('ss', $1, 'user', $2, 1), ('ss', $1, 'assistant', 'You said: ' || $2, 0))
         UPDATE switchyard_inbox SET answer = '{"ok":null}' WHERE run_id = $1`,
        [run, user]
      )
    // A new session is idle: its run starts with the statement, with no history.
    expect(await slot("one", "a")).toEqual({ slot: 1, joined: false, run_id: "coalesce:main:ss:1", history: [] })
    expect(await started()).toEqual([{ slot: 1, started: true }])
    await commit("coalesce:main:ss:1", "one")
    expect(await slot("two", "b")).toEqual({
      slot: 2,
      joined: false,
      run_id: "coalesce:main:ss:2",
      history: [["user", "one"], ["assistant", "You said: one"]]
    })
    // Run 2 is not answered yet: the next message opens a slot that waits, and the one after joins it.
    expect(await slot("three")).toEqual({ slot: 3, joined: false, run_id: "coalesce:main:ss:3", history: null })
    expect(await started()).toEqual([{ slot: 3, started: false }])
    expect(await slot("four")).toEqual({ slot: 3, joined: true, run_id: "coalesce:main:ss:3", history: null })
    expect(await slot("two", "b")).toEqual({ slot: null, joined: true, run_id: "coalesce:main:ss:2", history: null })
    await commit("coalesce:main:ss:2", "two")
    await query(`SELECT * FROM switchyard_turn_start('main', 'ss', 3, 'coalesce:main:ss:3', 'ss', 10)`)
    await commit("coalesce:main:ss:3", "three / four")
    // Idle again; at most the rows asked for, the newest.
    expect(await slot("five", null, 3)).toEqual({
      slot: 4,
      joined: false,
      run_id: "coalesce:main:ss:4",
      history: [["assistant", "You said: two"], ["user", "three / four"], ["assistant", "You said: three / four"]]
    })
    const inbox = await query<{ text: string; run_id: string }>(
      `SELECT text, run_id FROM switchyard_inbox WHERE session = 'ss' ORDER BY id`
    )
    expect(inbox.map((r) => `${r.text}@${r.run_id.slice(-1)}`)).toEqual([
      "one@1",
      "two@2",
      "three@3",
      "four@3",
      "five@4"
    ])
  })

  it("a turn started by its slot statement (prefetched) runs no statement before the model: the model gets the history and messages it carries; its commit writes nothing for a run answered before and the turn answers the stored answer; one that is not prefetched, or carries fewer rows than the agent reads, starts with turn_start", async () => {
    // A schema of its own whose turn_start is gone: a turn that calls it fails.
    await Effect.runPromise(
      Postgres.withClient(
        db!.url,
        (sql) =>
          Migrations.migrate({ prefix: "pre", cluster: false }).pipe(Effect.provideService(SqlClient.SqlClient, sql))
      )
    )
    await query(`DROP FUNCTION pre_turn_start(text, text, bigint, text, text, integer)`)
    const seen: Array<ReadonlyArray<{ role: string; content: string }>> = []
    const model = Layer.succeed(
      Model,
      {
        reply: (request) =>
          Effect.sync(() => {
            seen.push(request.transcript)
            return { text: "ok" }
          })
      } as Model["Service"]
    )
    const turn = (prefetched: ClusterTask["prefetched"]) =>
      Effect.runPromise(
        Effect.scoped(Effect.gen(function*() {
          const outbox = yield* PgDeliveryLog.make({ table: "pre_outbox" })
          const handlers = yield* ClusterAgent.handlers({ member: "me", outbox, prefix: "pre", historyLimit: 1 })
          return (yield* handlers.main({
            runId: `coalesce:main:pf:${seen.length + 1}`,
            lane: "main",
            key: "pf",
            generation: 0,
            command: { type: "message", session: "pf", text: "hello", inbox: true },
            admittedAt: 0,
            coalesceSlot: seen.length + 1,
            ...(prefetched === undefined ? {} : { prefetched })
          })) as ClusterAgent.TurnResult
        })).pipe(Effect.provide(model), Effect.provide(Postgres.layer(db!.url, { maxConnections: 2 })))
      )
    const history = [
      { role: "user" as const, content: "old" },
      { role: "assistant" as const, content: "older reply" },
      { role: "user" as const, content: "before" },
      { role: "assistant" as const, content: "reply" }
    ]
    const result = await turn({ texts: ["hello"], history, rows: 4 })
    expect([result.text, result.messages]).toEqual(["ok", 1])
    // historyLimit 1: the last two rows, then the run's message.
    expect(seen).toEqual([[
      { role: "user", content: "before" },
      { role: "assistant", content: "reply" },
      { role: "user", content: "hello" }
    ]])
    expect(await query(`SELECT role, content FROM pre_transcripts WHERE session = 'pf' ORDER BY id`)).toEqual([
      { role: "user", content: "hello" },
      { role: "assistant", content: "ok" }
    ])
    // A run whose answer is stored (a second delivery of a run that committed): its commit writes
    // nothing and the turn answers what was stored, not what its model said this time.
    await query(
      `INSERT INTO pre_inbox (session, text, run_id, received_at, answer) VALUES ('pf', 'hello', 'coalesce:main:pf:2', 0, $1)`,
      [JSON.stringify({ ok: { text: "first" } })]
    )
    /** The turn of the answered run 2 (prefetched), as its failure. */
    const answeredTurn = (fence?: { shard: string; epoch: number }) =>
      Effect.runPromise(
        Effect.scoped(Effect.gen(function*() {
          const outbox = yield* PgDeliveryLog.make({ table: "pre_outbox" })
          const handlers = yield* ClusterAgent.handlers({ member: "me", outbox, prefix: "pre", historyLimit: 1 })
          return yield* Effect.flip(handlers.main({
            runId: "coalesce:main:pf:2",
            lane: "main",
            key: "pf",
            generation: 0,
            command: { type: "message", session: "pf", text: "hello", inbox: true },
            admittedAt: 0,
            coalesceSlot: 2,
            ...(fence === undefined ? {} : { fence }),
            prefetched: { texts: ["hello"], history: [], rows: 4 }
          }))
        })).pipe(Effect.provide(model), Effect.provide(Postgres.layer(db!.url, { maxConnections: 2 })))
      )
    expect(await answeredTurn()).toEqual({
      _tag: "AlreadyAnswered",
      answer: JSON.stringify({ ok: { text: "first" } })
    })
    // The same at a stale epoch: fenced (the stale runner says so), whatever the run's new owner answered.
    await query(`INSERT INTO pre_shard_epochs VALUES ('default:7', 3, 'other', 0)`)
    const stale = await answeredTurn({ shard: "default:7", epoch: 2 })
    expect((stale as { _tag: string })._tag).toBe("Fenced")
    expect(seen.length).toBe(3)
    expect(await query(`SELECT count(*)::float8 AS n FROM pre_turns WHERE session = 'pf'`)).toEqual([{ n: 1 }])
    expect(await query(`SELECT count(*)::float8 AS n FROM pre_outbox WHERE recipient = 'pf'`)).toEqual([{ n: 1 }])
    // Both call the dropped function: the query fails and the model is never asked.
    await expect(turn(undefined)).rejects.toThrow(/Query failed/)
    await expect(turn({ texts: ["hello"], history: [], rows: 1 })).rejects.toThrow(/Query failed/)
    expect(seen.length).toBe(3)
  })

  it("a volatile run's answer: the slot records shard and generation; a failure is stored only at the epoch it arrived at (a newer epoch stores nothing and says so); turn_start returns a stored answer; the unanswered are listed by shard and age", async () => {
    await query(`INSERT INTO switchyard_shard_epochs VALUES ('default:3', 2, 'test', 0)`)
    const [{ run_id: runId }] = await query<{ run_id: string }>(
      `SELECT out_run_id AS run_id FROM switchyard_coalesce_slot('main', 'vs', 'vs', 'v1', 'hello', 1000, 'default:3', 7)`
    )
    const run = <A>(f: (answers: Answers.Answers) => Effect.Effect<A, unknown>) =>
      Effect.runPromise(
        Postgres.withClient(db!.url, (sql) =>
          Effect.flatMap(Answers.make().pipe(Effect.provideService(PgClient.PgClient, sql)), f))
      )
    expect(await run((a) => a.unanswered(["default:3"], 1001))).toEqual([
      { runId, session: "vs", text: "hello", receivedAt: 1000, generation: 7, shard: "default:3" }
    ])
    expect(await run((a) => a.unanswered(["default:3"], 1000))).toEqual([])
    expect(await run((a) => a.unanswered(["default:4"], 1001))).toEqual([])
    const canceled = Exit.fail({ _tag: "QueueFailure", reason: "canceled" })
    // Arrived at epoch 1: the shard is at 2 now, so another runner answers it.
    expect(await run((a) => a.mark(runId, canceled, { shard: "default:3", epoch: 1 }))).toBe(false)
    expect(await run((a) => a.of(runId))).toBeUndefined()
    expect(await run((a) => a.mark(runId, canceled, { shard: "default:3", epoch: 2 }))).toBe(true)
    expect(await run((a) => a.of(runId))).toEqual(canceled)
    expect(await run((a) => a.unanswered(["default:3"], 1001))).toEqual([])
    const rows = await query<{ src: string; content: string }>(
      `SELECT src, content FROM switchyard_turn_start('main', 'vs', NULL, $1, 'vs', 10)`,
      [runId]
    )
    expect(rows.filter((r) => r.src === "answer").map((r) => Answers.decode(r.content))).toEqual([canceled])
  })

  it("turn_start waits for the slot's lock, then reads the inbox rows committed under it (a fresh snapshot, not the one of its start)", async () => {
    await query(`INSERT INTO switchyard_coalesce VALUES ('main', 'snap', 1, false)`)
    const program = Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      return yield* sql.withTransaction(Effect.gen(function*() {
        // A dispatch joining slot 1: the slot's row locked, its message recorded, not committed yet.
        yield* sql.unsafe(`SELECT * FROM switchyard_coalesce_slot('main', 'snap', 'snap', NULL, 'late', 0)`)
        // The turn starts on another connection and waits for that lock.
        const turn = yield* Effect.forkDetach(
          Postgres.withClient(db!.url, (other) =>
            other.unsafe<{ src: string; content: string }>(
              `SELECT src, content FROM switchyard_turn_start('main', 'snap', 1, 'coalesce:main:snap:1', 'snap', 10)`
            ))
        )
        for (let i = 0;; i++) {
          // (activity statistics are a snapshot per transaction: cleared before each look)
          yield* sql.unsafe(`SELECT pg_stat_clear_snapshot()`)
          const waiting = yield* sql.unsafe<{ n: number }>(
            `SELECT count(*)::float8 AS n FROM pg_stat_activity WHERE datname = current_database()
             AND wait_event_type = 'Lock' AND query LIKE '%switchyard_turn_start%'`
          )
          if (Number(waiting[0].n) === 1) break
          if (i > 400) return yield* Effect.die(new Error("the turn did not wait for the slot's lock in 10 s"))
          yield* Effect.sleep("25 millis")
        }
        return turn
      })).pipe(Effect.flatMap(Fiber.join))
    }).pipe(Effect.provide(Postgres.layer(db!.url, { maxConnections: 2 })))
    const rows = await Effect.runPromise(program)
    expect(rows).toEqual([{ src: "inbox", content: "late" }])
    expect(await query(`SELECT started FROM switchyard_coalesce WHERE key = 'snap'`)).toEqual([{ started: true }])
  })

  it("only a turn's start commits without waiting for its WAL flush: its transaction ends at synchronous_commit off when it marked a slot, on without a slot; the slot statement (a message's acceptance) stays on", async () => {
    await query(`SELECT * FROM switchyard_coalesce_slot('main', 'async', 'async', NULL, 'hello', 0)`)
    const settingAfter = (statement: string) =>
      Effect.runPromise(
        Postgres.withClient(db!.url, (sql) =>
          sql.withTransaction(Effect.gen(function*() {
            yield* sql.unsafe(statement)
            return (yield* sql.unsafe<{ s: string }>(`SELECT current_setting('synchronous_commit') AS s`))[0].s
          })))
      )
    expect(
      await settingAfter(
        `SELECT * FROM switchyard_turn_start('main', 'async', 1, 'coalesce:main:async:1', 'async', 10)`
      )
    )
      .toBe("off")
    expect(await settingAfter(`SELECT * FROM switchyard_turn_start('main', 'async', NULL, 'r', 'async', 10)`)).toBe(
      "on"
    )
    expect(await settingAfter(`SELECT * FROM switchyard_coalesce_slot('main', 'async2', 'async2', NULL, 'hi', 0)`))
      .toBe("on")
    expect(await query(`SELECT started FROM switchyard_coalesce WHERE key = 'async'`)).toEqual([{ started: true }])
  })

  it("a turn's writes and its run's reply are one fenced statement: at a newer epoch nothing is written (no reply, the run left unprocessed); at the current epoch all of it", async () => {
    await query(`INSERT INTO switchyard_shard_epochs VALUES ('default:5', 4, 'other', 0)`)
    const message = (id: number) =>
      query(
        `INSERT INTO cluster_messages (id, message_id, shard_id, entity_type, entity_id, kind, tag, payload, headers, request_id)
         VALUES ($1, $2, 'default:5', 'switchyard/Key', 'main/fs', 0, 'Run', '{}', '{}', $1)`,
        [id, `switchyard/Key/main/fs/Run/run-${id}`]
      )
    const turn = (epoch: number, runId: string, requestId: number) =>
      Effect.runPromise(
        Effect.scoped(Effect.gen(function*() {
          const outbox = yield* PgDeliveryLog.make()
          const handlers = yield* ClusterAgent.handlers({ member: "me", outbox })
          let commit: ReplyCommit | undefined
          const task: ClusterTask = {
            runId,
            lane: "main",
            key: "fs",
            generation: 0,
            command: { type: "message", session: "fs", text: "hi" },
            admittedAt: 0,
            fence: { shard: "default:5", epoch },
            commitWithReply: (c) => {
              commit = c
            }
          }
          const result = (yield* handlers.main(task)) as { deliveryId: string }
          // Nothing is visible before the reply is saved.
          const before = yield* Effect.promise(() =>
            query<{ n: number }>(`SELECT count(*)::float8 AS n FROM switchyard_outbox`)
          )
          const written = yield* commit!({
            requestId: String(requestId),
            replyId: String(requestId + 1),
            payload: JSON.stringify({ _tag: "Success", value: result })
          })
          return { written, outboxBefore: Number(before[0].n), deliveryId: result.deliveryId }
        })).pipe(
          Effect.provide(ScriptedModel.layer({ latencyMs: 0 })),
          Effect.provide(Postgres.layer(db!.url, { maxConnections: 2 }))
        )
      )
    const state = async (requestId: number) => ({
      replies: Number(
        (await query<{ n: number }>(`SELECT count(*)::float8 AS n FROM cluster_replies WHERE request_id = $1`, [
          requestId
        ]))[0].n
      ),
      processed:
        (await query<{ processed: boolean }>(`SELECT processed FROM cluster_messages WHERE id = $1`, [requestId]))[0]
          .processed,
      outbox: Number(
        (await query<{ n: number }>(`SELECT count(*)::float8 AS n FROM switchyard_outbox WHERE recipient = 'fs'`))[0].n
      ),
      transcript: Number(
        (await query<{ n: number }>(`SELECT count(*)::float8 AS n FROM switchyard_transcripts WHERE session = 'fs'`))[0]
          .n
      ),
      turns: Number(
        (await query<{ n: number }>(`SELECT count(*)::float8 AS n FROM switchyard_turns WHERE session = 'fs'`))[0].n
      )
    })
    await message(1000)
    const stale = await turn(3, "run-1000", 1000)
    expect([stale.written, stale.outboxBefore]).toEqual([false, 0])
    expect(await state(1000)).toEqual({ replies: 0, processed: false, outbox: 0, transcript: 0, turns: 0 })
    await message(2000)
    const current = await turn(4, "run-2000", 2000)
    expect([current.written, current.outboxBefore]).toEqual([true, 0])
    expect(await state(2000)).toEqual({ replies: 1, processed: true, outbox: 1, transcript: 2, turns: 1 })
    const entry = await query<{ id: string }>(`SELECT id FROM switchyard_outbox WHERE recipient = 'fs'`)
    expect(entry.map((e) => e.id)).toEqual([current.deliveryId])
    const reply = await query<{ payload: string }>(`SELECT payload FROM cluster_replies WHERE request_id = 2000`)
    expect(JSON.parse(reply[0].payload).value.deliveryId).toBe(current.deliveryId)
  })
  it("a turn run again for a run whose reply is in the outbox (no reply commit: the outbox is idempotent by run id) returns the id of that entry as its deliveryId", async () => {
    const run = () =>
      Effect.runPromise(
        Effect.scoped(Effect.gen(function*() {
          const outbox = yield* PgDeliveryLog.make()
          const handlers = yield* ClusterAgent.handlers({ member: "me", outbox })
          return (yield* handlers.main({
            runId: "run-again",
            lane: "main",
            key: "again",
            generation: 0,
            command: { type: "message", session: "again", text: "hi" },
            admittedAt: 0
          })) as ClusterAgent.TurnResult
        })).pipe(
          Effect.provide(ScriptedModel.layer({ latencyMs: 0 })),
          Effect.provide(Postgres.layer(db!.url, { maxConnections: 2 }))
        )
      )
    const first = await run()
    const second = await run()
    const entries = await query<{ id: string }>(`SELECT id FROM switchyard_outbox WHERE recipient = 'again'`)
    expect(entries.map((e) => e.id)).toEqual([first.deliveryId])
    expect([second.deliveryId, second.turnRunner]).toEqual([first.deliveryId, "me"])
  })
  it("a model's own retries in a turn are logged as warnings naming the session and the run; the turn then answers", async () => {
    const logs = captureLogs()
    const model = Layer.succeed(
      Model,
      {
        reply: (request) =>
          Effect.sync(() => {
            request.onRetry?.({ reason: "rate-limit", status: 429, retryInMs: 20_000, retry: 1, maxRetries: 2 })
            return { text: "answered" }
          })
      } as Model["Service"]
    )
    const result = await Effect.runPromise(
      Effect.scoped(Effect.gen(function*() {
        const outbox = yield* PgDeliveryLog.make()
        const handlers = yield* ClusterAgent.handlers({ member: "me", outbox })
        const result = (yield* handlers.main({
          runId: "run-retried",
          lane: "main",
          key: "retried",
          generation: 0,
          command: { type: "message", session: "retried", text: "hi" },
          admittedAt: 0
        })) as ClusterAgent.TurnResult
        // the line is logged by a fiber of its own: let it run
        yield* Effect.yieldNow
        return result
      })).pipe(
        Effect.provide(model),
        Effect.provide(Postgres.layer(db!.url, { maxConnections: 2 })),
        Effect.provide(logs.layer)
      )
    )
    expect(result.text).toBe("answered")
    expect(logs.lines.filter((l) => l.level === "Warn").map((l) => l.message)).toEqual([
      "the model answered 429 (rate limited) for session retried: trying again in 20 s (retry 1 of 2) (run run-retried)"
    ])
  })
})
