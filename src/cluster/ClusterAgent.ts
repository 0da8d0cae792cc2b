/**
 * The agent's turns as cluster lane handlers. A turn reads the session's transcript from Postgres,
 * calls the Model, then in one statement, fenced by its shard's epoch, appends the reply to the
 * Postgres outbox (idempotent by run id, so a turn replayed on another runner after a crash never
 * enqueues its reply twice), stores the exchange and records the turn. Every turn is also recorded in `<prefix>_turns` (session, runner, start, end, the shard
 * and epoch it committed under), which is
 * what `/status` and the multi-process test read.
 */
import { PgClient } from "@effect/sql-pg"
import { Clock, Effect, Exit } from "effect"
import { cronSession } from "../agent/CronJobs.js"
import { HEARTBEAT_SESSION } from "../agent/Heartbeat.js"
import type { Model as ModelService } from "../agent/Model.js"
import { describeModelRetry, Model } from "../agent/Model.js"
import * as Answers from "./Answers.js"
import type { AlreadyAnswered } from "./Answers.js"
import { Fenced } from "./Fencing.js"
import type { FenceToken } from "./Fencing.js"
import { marksSlot, writesAnswer } from "./LaneHandler.js"
import type { ClusterTask, LaneHandler } from "./LaneHandler.js"
import type { PgDeliveryLog } from "./PgDeliveryLog.js"
import * as Storage from "./Storage.js"
import * as Timing from "./Timing.js"

/** A user message for the `main` lane; the key is the session. */
export interface MessageCommand {
  readonly type: "message"
  readonly session: string
  readonly text: string
  /** The run's messages are the inbox rows recorded for its run id (Inbox.ts); `text` is the first one's. */
  readonly inbox?: boolean
}

/** A cron run for the `cron` lane; the key is the job's name. */
export interface CronCommand {
  readonly type: "cron"
  readonly job: string
  readonly prompt: string
  /** Recipient of the reply; default the job's session. */
  readonly to?: string
  /** The due time (epoch ms). */
  readonly dueAt: number
}

/**
 * What a turn returns to its future (and, through the ingress, to a client waiting with `?wait=`).
 * The turn's runner is not the runner that delivers the reply: any runner's deliverer may take the
 * outbox entry (one that stops before its deliverer took it leaves it to the others), and the
 * `--outbox` line of the entry names that one (`deliveredBy`).
 */
export interface TurnResult {
  readonly text: string
  /** The id of the reply's outbox entry (the `id` of its `--outbox` line); `""` when there was nothing to answer. */
  readonly deliveryId: string
  /** The runner whose turn committed the reply (the `runner` of its `switchyard_turns` row). */
  readonly turnRunner: string
  /** How many messages the turn answered together. */
  readonly messages: number
}

/** Turns of history a model call sees when {@link ClusterAgentOptions.historyLimit} is not given. */
export const DEFAULT_HISTORY_LIMIT = 20

/** Options of {@link handlers}. */
export interface ClusterAgentOptions {
  readonly member: string
  readonly outbox: PgDeliveryLog
  /** The channel name written into outbound messages; default `"console"`. */
  readonly channel?: string
  readonly system?: string
  readonly maxTokens?: number
  /** Turns of history a model call sees; default 20. */
  readonly historyLimit?: number
  /** Table prefix; default `switchyard`. */
  readonly prefix?: string
  /** Called after a turn's reply was committed to the outbox (the runner wakes its deliverer). */
  readonly onCommit?: () => void
}

/**
 * Why `session` cannot be a user's session, or `undefined`: the runner's own turns use `heartbeat` and
 * `cron:<job>`, and a user message there would join their transcripts.
 */
export const reservedSession = (session: string): string | undefined =>
  session === HEARTBEAT_SESSION
    ? `\`${HEARTBEAT_SESSION}\` is the heartbeat's session`
    : session.startsWith(cronSession(""))
    ? `\`${cronSession("*")}\` sessions belong to cron jobs`
    : undefined

/** A turn's start when its slot statement did not start it (Migrations 0005, 0008): slot started, inbox rows, history. */
const turnStartSql = (prefix: string): string =>
  `SELECT src, id, role, content FROM ${prefix}_turn_start($1, $2, $3, $4, $5, $6)`

/** What a turn's commit writes (see {@link prepareCommit}). */
interface CommitInput {
  readonly session: string
  readonly to: string
  readonly kind: "user" | "cron"
  readonly job: string | undefined
  readonly runId: string
  readonly texts: ReadonlyArray<string>
  readonly reply: string
  readonly member: string
  readonly startedAt: number
  readonly endedAt: number
  readonly fence: FenceToken | undefined
  readonly deliveryId: string
  /** The run's answer as Answers.ts stores it. */
  readonly answer: string | undefined
}

/**
 * A turn's commit, checked and ready to run: what makes the turn visible (the reply in the outbox, the
 * exchange in the transcript, the turn record, the run's answer in its inbox rows) in one statement, written
 * only while the shard's epoch is the one the turn started under (Fencing.ts) and the run has no stored
 * answer. The same text whatever the input (one prepared statement per connection, warmed by
 * {@link warmStatements}).
 */
const prepareCommit = (outbox: PgDeliveryLog, prefix: string, channel: string, input: CommitInput) => {
  const unanswered = `NOT EXISTS (SELECT 1 FROM ${prefix}_inbox a WHERE a.run_id = $11 AND a.answer IS NOT NULL)`
  const { fence, job, session } = input
  return outbox.prepareGuarded({
    channel,
    to: input.to,
    body: {
      session,
      kind: input.kind,
      text: input.reply,
      messages: input.texts.length,
      ...(job === undefined ? {} : { job })
    },
    idempotencyKey: `reply:${input.runId}`
  }, {
    id: input.deliveryId,
    // Nothing is written for a run whose answer is stored already (its turn committed before: a run
    // delivered twice whose turn did not read its stored answer first, the prefetched start); the turn
    // then answers what was stored.
    guard: fence === undefined
      ? `SELECT 1 WHERE ${unanswered}`
      : `SELECT 1 FROM ${prefix}_shard_epochs WHERE shard = $17::text AND epoch = $18::bigint AND ${unanswered} FOR SHARE`,
    also: [
      `INSERT INTO ${prefix}_transcripts (session, run_id, role, content, part)
             SELECT $10, $11, v.role, v.content, v.part FROM locked, (
               SELECT 'user' AS role, u.content, u.part::integer AS part FROM unnest($12::text[]) WITH ORDINALITY AS u (content, part)
               UNION ALL SELECT 'assistant', $13::text, 0) AS v
             ON CONFLICT (run_id, role, part) DO NOTHING`,
      `INSERT INTO ${prefix}_turns (session, runner, run_id, started_at, ended_at, shard, epoch)
             SELECT $10, $14, $11, $15::bigint, $16::bigint, $17::text, $18::bigint FROM locked`,
      // The run's answer in its inbox rows (Answers.ts): a volatile run sent again is answered from it.
      `UPDATE ${prefix}_inbox SET answer = $19::text FROM locked WHERE run_id = $11`
    ],
    params: [
      session,
      input.runId,
      input.texts,
      input.reply,
      input.member,
      input.startedAt,
      input.endedAt,
      fence?.shard ?? null,
      fence?.epoch ?? null,
      input.answer
    ]
  })
}

/**
 * One round of a connection's warm-up (Warmup.ts): a turn's statements as a turn runs them, on inputs that
 * write nothing (a session and run of their own, and a fence of no shard, which the commit's guard refuses)
 * and are run in a transaction that is rolled back anyway: the fenced commit and the turn's start.
 */
export const warmStatements = (options: {
  readonly outbox: PgDeliveryLog
  readonly member: string
  readonly prefix?: string
  readonly channel?: string
  readonly historyLimit?: number
}) =>
(round: number, connection: number): Effect.Effect<void, unknown, PgClient.PgClient> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const prefix = options.prefix ?? "switchyard"
    const session = `\u0001warmup:${options.member}:${connection}:${round}`
    const runId = `warmup:${options.member}:${connection}:${round}`
    const now = Date.now()
    yield* sql.unsafe(turnStartSql(prefix), [
      "main",
      session,
      1,
      runId,
      session,
      (options.historyLimit ?? DEFAULT_HISTORY_LIMIT) * 2
    ])
    const commit = yield* prepareCommit(options.outbox, prefix, options.channel ?? "console", {
      session,
      to: session,
      kind: "user",
      job: undefined,
      runId,
      texts: ["warm-up"],
      reply: "You said: warm-up",
      member: options.member,
      startedAt: now,
      endedAt: now,
      // No shard has this name: the guard is empty and nothing is written.
      fence: { shard: `warmup:${options.member}`, epoch: 0 },
      deliveryId: crypto.randomUUID(),
      answer: Answers.encode(Exit.succeed({ text: "", deliveryId: "", turnRunner: options.member, messages: 1 }))
    })
    const written = yield* commit()
    if (written !== undefined) return yield* Effect.die(new Error("the warm-up's commit wrote a row"))
  })

/** The lane handlers of the agent: `main` answers user messages, `cron` runs cron jobs. */
export const handlers = (
  options: ClusterAgentOptions
): Effect.Effect<Record<string, LaneHandler>, never, PgClient.PgClient | ModelService> =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const model = yield* Model
    // A model's own retry (a 429 waited out) is told from a callback: logged by a fiber of its own.
    const runFork = Effect.runForkWith(yield* Effect.context<never>())
    const prefix = options.prefix ?? "switchyard"
    const historyLimit = options.historyLimit ?? DEFAULT_HISTORY_LIMIT
    const channel = options.channel ?? "console"
    const system = options.system ?? "You are a helpful assistant."
    const maxTokens = options.maxTokens ?? 1024

    const turn = (
      task: ClusterTask,
      session: string,
      text: string,
      to: string,
      kind: "user" | "cron",
      job?: string,
      inbox = false
    ) =>
      Effect.gen(function*() {
        const startedAt = yield* Clock.currentTimeMillis
        // The model's view of the session before this turn: `{ role, content }` rows, oldest first.
        let history: ReadonlyArray<{ readonly role: "user" | "assistant"; readonly content: string }>
        const recorded: Array<string> = []
        const prefetched = task.prefetched
        if (prefetched !== undefined && prefetched.rows >= historyLimit * 2) {
          // Started by the dispatch's slot statement (an idle session): its messages and history came with
          // the run (SlotStartSql.ts), so no statement before the model. Its rows are `{ role, content }`
          // already (Coalesce.ts, or the RunNow's Schema decode), passed on as they are.
          const extra = prefetched.history.length - historyLimit * 2
          history = extra > 0 ? prefetched.history.slice(extra) : prefetched.history
          recorded.push(...prefetched.texts)
        } else {
          // The run's coalescing slot marked started (later messages take the next run), then the messages
          // recorded for this run in the inbox and the session's history: one statement (Migrations 0005).
          const rows = yield* sql.unsafe<
            {
              readonly src: "inbox" | "history" | "answer"
              readonly id: number
              readonly role: "user" | "assistant"
              readonly content: string
            }
          >(
            turnStartSql(prefix),
            [task.lane, task.key, task.coalesceSlot ?? null, task.runId, session, historyLimit * 2]
          )
          // Answered before (a volatile run sent again after its turn committed, Answers.ts): that answer.
          const answered = rows.find((r) => r.src === "answer")
          if (answered !== undefined) {
            return yield* Effect.fail({ _tag: "AlreadyAnswered", answer: answered.content } satisfies AlreadyAnswered)
          }
          const byId = (a: { id: number }, b: { id: number }) => Number(a.id) - Number(b.id)
          history = rows.filter((r) => r.src === "history").sort(byId).map((r) => ({
            role: r.role,
            content: r.content
          }))
          recorded.push(...rows.filter((r) => r.src === "inbox").sort(byId).map((r) => r.content))
        }
        Timing.mark(task.runId, "turnStarted")
        const texts = recorded.length > 0 ? recorded : inbox ? [] : [text]
        // A run of the inbox with no message of its own (a re-sent message that took a slot of its own
        // while its first copy was answered by another run): nothing to answer.
        if (texts.length === 0) {
          return { text: "", deliveryId: "", turnRunner: options.member, messages: 0 } satisfies TurnResult
        }
        const reply = yield* model.reply({
          system,
          transcript: [
            ...history,
            ...texts.map((content) => ({ role: "user" as const, content }))
          ],
          maxTokens,
          onRetry: (retry) =>
            void runFork(Effect.logWarning(`${describeModelRetry(retry, session)} (run ${task.runId})`))
        })
        const endedAt = yield* Clock.currentTimeMillis
        Timing.mark(task.runId, "modelDone")
        // What makes the turn visible (the reply in the outbox, the exchange in the transcript, the turn
        // record) is one statement, written only while the shard's epoch is the one the turn started
        // under (Fencing.ts): a runner that stalled past its lease and lost the shard writes nothing.
        // Where the runner can, that statement also saves the run's reply (Storage.ts): the turn is
        // visible exactly when its run is answered, in one transaction.
        const fence = task.fence
        const deliveryId = crypto.randomUUID()
        const result: TurnResult = {
          text: reply.text,
          deliveryId,
          turnRunner: options.member,
          messages: texts.length
        }
        // Checked now (a reply the outbox refuses fails the turn), written by `commit`.
        const statement = yield* prepareCommit(options.outbox, prefix, channel, {
          session,
          to,
          kind,
          job,
          runId: task.runId,
          texts,
          reply: reply.text,
          member: options.member,
          startedAt,
          endedAt,
          fence,
          deliveryId,
          answer: Answers.encode(Exit.succeed(result))
        })
        // With the run's reply (Storage.replyWrites: parameters from $20 on), or on its own.
        const write = (withReply: Storage.ReplyRow | undefined) =>
          statement(
            withReply === undefined
              ? undefined
              : { also: Storage.replyWrites(20), params: Storage.replyParams(withReply) }
          )
        const commit = (withReply: Storage.ReplyRow | undefined) => Effect.map(write(withReply), (e) => e !== undefined)
        const fenced = () => new Fenced(fence?.shard ?? "?", fence?.epoch ?? 0, task.runId)
        if (task.commitWithReply !== undefined) {
          let logged = false
          task.commitWithReply((row) =>
            (Timing.enabled
              ? Effect.andThen(Effect.sync(() => Timing.mark(task.runId, "commit0")), commit(row))
              : commit(row)).pipe(
                Effect.tap((written) => {
                  Timing.mark(task.runId, "commit1")
                  if (written) return Effect.sync(() => options.onCommit?.())
                  if (logged) return Effect.void
                  logged = true
                  return Effect.logWarning(
                    `fenced: run ${task.runId} of ${task.lane}/${task.key} dropped, its writes refused (${fenced().message}); the shard's owner runs it`
                  )
                })
              )
          )
          return result
        }
        Timing.mark(task.runId, "commit0")
        const entry = yield* write(undefined)
        Timing.mark(task.runId, "commit1")
        if (entry === undefined) {
          // Refused: the shard has a newer epoch (fenced, whatever the new owner did since), or else the run
          // was answered before (that answer is sent).
          const [now] = yield* sql.unsafe<{ readonly epoch: number | null; readonly answer: string | null }>(
            `SELECT (SELECT epoch::float8 FROM ${prefix}_shard_epochs WHERE shard = $2::text) AS epoch,
               (SELECT answer FROM ${prefix}_inbox WHERE run_id = $1 AND answer IS NOT NULL LIMIT 1) AS answer`,
            [task.runId, fence?.shard ?? null]
          )
          const stale = fence !== undefined && Number(now.epoch) !== fence.epoch
          if (!stale && now.answer !== null) {
            return yield* Effect.fail({ _tag: "AlreadyAnswered", answer: now.answer } satisfies AlreadyAnswered)
          }
          return yield* Effect.fail(fenced())
        }
        options.onCommit?.()
        // The entry of a run that committed before (the outbox is idempotent by run id) keeps its id.
        return entry.id === deliveryId ? result : { ...result, deliveryId: entry.id }
      }).pipe(
        Effect.mapError((e) => e._tag === "AlreadyAnswered" ? e : { _tag: e._tag, message: e.message })
      )

    // Each marks its run's coalescing slot started in its first statement (LaneHandler.ts marksSlot).
    return {
      // Its commit writes the run's answer (LaneHandler.ts writesAnswer): the ingress's runs are volatile.
      main: writesAnswer(marksSlot((task) => {
        const c = task.command as MessageCommand
        return turn(task, task.key, String(c.text), task.key, "user", undefined, c.inbox === true)
      })),
      cron: marksSlot((task) => {
        const c = task.command as CronCommand
        const session = cronSession(c.job)
        return turn(task, session, String(c.prompt), c.to ?? session, "cron", c.job)
      }),
      heartbeat: marksSlot((task) =>
        turn(
          task,
          HEARTBEAT_SESSION,
          String((task.command as { prompt?: string }).prompt ?? "Heartbeat"),
          HEARTBEAT_SESSION,
          "user"
        )
      )
    }
  })
