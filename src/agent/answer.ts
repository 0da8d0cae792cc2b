/**
 * The work of one turn of an agent, whatever started it: call the model, record the turn in the
 * session's transcript, log its reply (durable), then mark the reply logged; and log a reply that a
 * crash (or a failed append) left recorded and maybe not logged. Below `turns.ts`, which decides
 * when a turn runs and with which messages.
 */
import { Effect } from "effect"
import type { DeliveryEntry, DeliveryQueue } from "../delivery/index.js"
import type { AgentEvent, TurnResult } from "./events.js"
import { isHeartbeatOk } from "./Heartbeat.js"
import type { Model } from "./Model.js"
import { replyMessages } from "./replies.js"
import { toMessages } from "./Transcripts.js"
import type { SessionState, Transcripts, TurnKind, TurnRecord } from "./Transcripts.js"
import { classify, errorText } from "./turnErrors.js"
import type { TurnError } from "./types.js"

/** What a turn's work needs of the agent. */
export interface AnswerDeps {
  readonly model: Model["Service"]
  readonly deliveries: DeliveryQueue.DeliveryQueue
  readonly transcripts: Transcripts
  readonly channelName: string
  readonly system: string
  readonly maxTokens: number
  readonly emit: (event: AgentEvent) => void
  /** The delivery log's record limit: larger replies are split. */
  readonly maxRecordBytes: number
}

/** One turn to answer: its kind, its session's state as loaded, the user texts it answers. */
export interface Turn {
  readonly kind: TurnKind
  readonly session: string
  readonly state: SessionState
  readonly user: ReadonlyArray<string>
  readonly answered: ReadonlyArray<number>
  readonly job?: string
  readonly to: () => string
}

/** Builds the turn work of one agent. */
export const makeAnswer = (deps: AnswerDeps) => {
  const { emit, transcripts } = deps

  /**
   * Logs a reply (in parts when it is larger than a record, in order), then marks it logged. A
   * reply the log refuses for good (`too-large`, `invalid`) is given up: marked logged all the
   * same, so the session moves on, and the failure goes on to the caller.
   */
  const logReply = (session: string, record: TurnRecord): Effect.Effect<ReadonlyArray<DeliveryEntry>, TurnError> =>
    Effect.gen(function*() {
      const entries: Array<DeliveryEntry> = []
      for (const message of replyMessages(deps.channelName, session, record, deps.maxRecordBytes)) {
        entries.push(yield* deps.deliveries.enqueue(message))
      }
      yield* transcripts.markSent(session, record.n)
      return entries
    }).pipe(
      Effect.tapError((error) =>
        classify(error).final
          ? Effect.andThen(
            Effect.logWarning(
              `switchyard: the reply of turn ${record.n} of \`${session}\` is given up (the delivery log refuses it): ${
                errorText(error)
              }`
            ),
            Effect.ignore(transcripts.markSent(session, record.n))
          )
          : Effect.void
      )
    )

  /** A reply recorded before a crash (or a failed append) and maybe not logged: log it (once, by its idempotency keys). */
  const flushUnsent = (session: string, state: SessionState): Effect.Effect<void, TurnError> =>
    state.unsent === undefined
      ? Effect.void
      : logReply(session, state.unsent).pipe(
        Effect.asVoid,
        // Given up for good: this turn goes on with what is accepted (the session is not wedged).
        Effect.catchIf(
          (error) => classify(error).final,
          (error) =>
            Effect.sync(() =>
              emit({
                type: "turn-failed",
                kind: state.unsent!.kind,
                session,
                error: errorText(error),
                messages: state.pending.length,
                retryable: false,
                kept: false
              })
            )
        )
      )

  /** Calls the model, records the turn, logs the reply (durable), then marks it logged. */
  const answer = (turn: Turn): Effect.Effect<TurnResult, TurnError> => {
    const { kind, session, state, user } = turn
    const job = turn.job === undefined ? {} : { job: turn.job }
    const messages = kind === "user" ? user.length : 1
    const n = state.nextTurn
    return Effect.gen(function*() {
      emit({ type: "turn-started", kind, session, turn: n, messages, ...job })
      const reply = yield* deps.model.reply({
        system: deps.system,
        transcript: toMessages(state, user),
        maxTokens: deps.maxTokens,
        onText: (chunk) => emit({ type: "text", kind, session, turn: n, chunk }),
        onRetry: (retry) => emit({ type: "model-retry", kind, session, turn: n, ...retry })
      })
      if (kind === "heartbeat" && isHeartbeatOk(reply.text)) {
        const result: TurnResult = { session, kind, turn: n, text: reply.text, messages, suppressed: true }
        emit({ type: "turn-ended", ...result })
        emit({ type: "heartbeat", suppressed: true, text: reply.text })
        return result
      }
      const record = yield* transcripts.record(session, {
        kind,
        answered: turn.answered,
        user,
        reply: reply.text,
        to: turn.to(),
        ...job
      })
      const entries = yield* logReply(session, record)
      const entry = entries[0]!
      const result: TurnResult = {
        session,
        kind,
        turn: record.n,
        text: reply.text,
        messages,
        suppressed: false,
        id: entry.id,
        ...(entries.length > 1 ? { ids: entries.map((e) => e.id) } : {}),
        ...job
      }
      emit({ type: "turn-ended", ...result })
      if (kind === "heartbeat") emit({ type: "heartbeat", suppressed: false, text: reply.text, id: entry.id })
      return result
    }).pipe(
      // A user turn's failure is reported by its finalizer (it knows the retry); these go on at the next tick.
      Effect.tapError((error) =>
        kind === "user" ? Effect.void : Effect.andThen(
          Effect.sync(() =>
            emit({
              type: "turn-failed",
              kind,
              session,
              error: errorText(error),
              messages: 0,
              retryable: classify(error).retryable,
              kept: !classify(error).final
            })
          ),
          Effect.logWarning(`switchyard: ${kind} turn of \`${session}\` failed: ${errorText(error)}`)
        )
      )
    )
  }

  return { logReply, flushUnsent, answer }
}
