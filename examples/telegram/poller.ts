/**
 * The receiving side: long-polls `getUpdates` and turns each text message into
 * `agent.sendAll(<chat id>, texts)`; a message without text (a photo, a sticker) gets a polite reply.
 *
 * Nothing lost, nothing twice, across a SIGKILL at any point:
 * - the next `offset` is stored (`state.json`) only after the batch's `sendAll` calls returned, so
 *   an update is confirmed to Telegram (`getUpdates` with a higher offset) only once it is durable
 *   in the agent;
 * - before the sends, the batch is written down (which updates go to which session, and each
 *   session's `nextSeq`): if the process dies between a `sendAll` and the stored offset, the next
 *   start sees the session's `nextSeq` moved past the recorded one, and skips those updates when
 *   Telegram gives the batch again. (The bot must be the only sender of its sessions.)
 * - polite replies are appended with an idempotency key per update, so a batch given again does
 *   not append them twice.
 */
import { Effect } from "effect"
import type { Agent, TranscriptError } from "../../src/agent/index.js"
import type { DeliveryLogError } from "../../src/delivery/index.js"
import type { RequestError } from "../../src/queue/index.js"
import { contentKind, updateKind } from "./botApi.js"
import type { BotApi, BotApiError, Update } from "./botApi.js"
import { readState, writeState } from "./stateFile.js"

/** What `state.json` holds. */
export interface PollState {
  /** The next `getUpdates` offset (the last update stored + 1). */
  readonly offset?: number
  /** The batch being sent, written before its sends. */
  readonly batch?: {
    readonly sessions: Readonly<Record<string, number>>
    readonly updates: ReadonlyArray<{ readonly id: number; readonly session: string }>
  }
}

/** A failure the bot cannot get past by waiting (the token was refused). */
export class FatalPollError extends Error {
  readonly _tag = "FatalPollError"
}

export interface PollerOptions {
  readonly api: BotApi
  readonly agent: Agent.Agent
  readonly stateFile: string
  /** `getUpdates`' `timeout`, in seconds. */
  readonly pollTimeoutS: number
  readonly log: (line: string) => void
}

type Outcome = "sent" | "stop" | "again"

/** The polite answer to a message the bot cannot read. */
export const notTextReply = (kind: string): string =>
  `I can only read text messages for now, so I cannot answer this ${kind}. Please write it as text.`

/** Delays after a failed `getUpdates` (the last repeats), unless Telegram says how long to wait. */
const POLL_BACKOFF_MS = [1_000, 2_000, 5_000, 10_000, 30_000]

/** Updates of the stored batch that are in the agent already (their session's `nextSeq` moved). */
const acceptedBefore = (agent: Agent.Agent, state: PollState) =>
  Effect.gen(function*() {
    const done = new Set<number>()
    const batch = state.batch
    if (batch === undefined) return done
    for (const [session, nextSeq] of Object.entries(batch.sessions)) {
      const now = yield* agent.transcripts.load(session)
      if (now.nextSeq > nextSeq) { for (const u of batch.updates) if (u.session === session) done.add(u.id) }
    }
    return done
  })

/** How long to wait before taking a batch again after a disk or log failure. */
const RETRY_BATCH_MS = 5_000

/** Runs until interrupted or until the agent stops taking messages; fails with `FatalPollError` on a refused token. */
export const poll = (options: PollerOptions): Effect.Effect<void, FatalPollError> => {
  const { api, agent, log } = options
  const polite = (session: string, updateId: number, text: string) =>
    agent.deliveries.enqueue({
      channel: "telegram",
      to: session,
      body: { text },
      idempotencyKey: `telegram:update:${updateId}`
    })

  /** One batch: send its messages, then store the next offset. Returns false when the agent stopped taking messages. */
  const handle = (state: PollState, done: Set<number>, updates: ReadonlyArray<Update>) =>
    Effect.gen(function*() {
      const texts = new Map<string, Array<{ readonly id: number; readonly text: string }>>()
      const notes: Array<{ readonly id: number; readonly session: string; readonly text: string }> = []
      for (const update of updates) {
        const message = update.message
        if (done.has(update.update_id)) {
          log(`update ${update.update_id}: accepted before the restart, not sent again`)
        } else if (message === undefined) {
          log(`update ${update.update_id}: ignored (${updateKind(update)}, not a message)`)
        } else if (typeof message.text === "string" && message.text !== "") {
          const session = String(message.chat.id)
          log(`← ${session}: ${message.text.length > 80 ? `${message.text.slice(0, 80)}...` : message.text}`)
          const list = texts.get(session) ?? []
          list.push({ id: update.update_id, text: message.text })
          texts.set(session, list)
        } else {
          const kind = contentKind(message)
          log(`← ${String(message.chat.id)}: a ${kind}, answered that only text is read`)
          notes.push({ id: update.update_id, session: String(message.chat.id), text: notTextReply(kind) })
        }
      }
      if (texts.size > 0) {
        const sessions: Record<string, number> = {}
        for (const session of texts.keys()) sessions[session] = (yield* agent.transcripts.load(session)).nextSeq
        const batchUpdates = [...texts].flatMap(([session, list]) => list.map((m) => ({ id: m.id, session })))
        yield* writeState(
          options.stateFile,
          { ...state, batch: { sessions, updates: batchUpdates } } satisfies PollState
        )
      }
      for (const [session, list] of texts) {
        const outcome = yield* agent.sendAll(session, list.map((m) => m.text)).pipe(
          Effect.as<Outcome>("sent"),
          Effect.catch((error): Effect.Effect<Outcome, DeliveryLogError | TranscriptError | RequestError> => {
            switch (error._tag) {
              case "AdmissionError":
                // Closed: shutting down, stop here (the next start takes the batch again). Full: take it again later.
                return error.reason === "closed"
                  ? Effect.succeed("stop")
                  : Effect.as(retryLater(error.message), "again")
              case "MessageTooLarge":
                return Effect.as(
                  polite(session, list[0]!.id, `Your message is too long for me: ${error.message}`),
                  "sent"
                )
              default:
                return Effect.fail(error)
            }
          })
        )
        if (outcome === "stop") return false
        if (outcome === "again") return true
        if (process.env.SWITCHYARD_TELEGRAM_KILL_AFTER_SEND === "1") process.kill(process.pid, "SIGKILL") // the crash test's hook
      }
      for (const note of notes) yield* polite(note.session, note.id, note.text)
      const last = updates.reduce((max, u) => Math.max(max, u.update_id), -1)
      yield* writeState(options.stateFile, { offset: last + 1 } satisfies PollState)
      return true
    })

  const retryLater = (why: string) =>
    Effect.as(
      Effect.andThen(
        Effect.sync(() => log(`error: ${why}; taking the batch again in ${RETRY_BATCH_MS / 1000} s`)),
        Effect.sleep(RETRY_BATCH_MS)
      ),
      true
    )

  const getUpdates = (offset: number | undefined) =>
    api.call<ReadonlyArray<Update>>(
      "getUpdates",
      { ...(offset === undefined ? {} : { offset }), timeout: options.pollTimeoutS, allowed_updates: ["message"] },
      options.pollTimeoutS * 1000 + 15_000
    )

  /** Waits after a failed `getUpdates`; fails for good on a refused token. */
  const afterPollError = (error: BotApiError, failures: number) => {
    if (error.status === 401 || error.status === 404) {
      return Effect.fail(new FatalPollError(`Telegram refused the token: ${error.message}`))
    }
    const wait = error.retryAfterMs ?? POLL_BACKOFF_MS[Math.min(failures, POLL_BACKOFF_MS.length) - 1]!
    const hint = error.status === 409 ? " (another process polls this bot, or a webhook is set: deleteWebhook)" : ""
    if (failures === 1 || error.status === 429) {
      log(`error: ${error.message}${hint}; polling again in ${Math.round(wait / 1000)} s`)
    }
    return Effect.sleep(wait)
  }

  /** The next non-empty batch; waits out failures (Telegram's retry_after, else a backoff). */
  const nextBatch = (offset: number | undefined) =>
    Effect.gen(function*() {
      let failures = 0
      while (true) {
        const result = yield* Effect.result(getUpdates(offset))
        if (result._tag === "Failure") {
          yield* afterPollError(result.failure, ++failures)
          continue
        }
        if (failures > 0) log("polling again")
        failures = 0
        if (result.success.length > 0) return result.success
      }
    })

  return Effect.gen(function*() {
    while (true) {
      // (Re)start from what is on disk: the offset, and which updates of an unfinished batch the agent has.
      const going = yield* Effect.gen(function*() {
        const state = yield* readState<PollState>(options.stateFile, {})
        const done = yield* acceptedBefore(agent, state)
        const updates = yield* nextBatch(state.offset)
        return yield* handle(state, done, updates)
      }).pipe(
        // A disk or log failure: nothing was confirmed to Telegram; the batch is taken again after a pause.
        Effect.catchTags({
          StateFileError: (error) => retryLater(error.message),
          TranscriptError: (error) => retryLater(error.message),
          RequestError: (error) => retryLater(error.message),
          DeliveryLogError: (error) => retryLater(error.message)
        })
      )
      if (!going) return
    }
  })
}
