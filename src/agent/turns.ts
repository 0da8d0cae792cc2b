/**
 * The turns of an agent: accepting user messages, running user / heartbeat / cron turns, and
 * finishing on start what a crash interrupted (a turn's own work: `answer.ts`; what `send` refuses:
 * `sendChecks.ts`). `Agent.make` wires this to the queue and the log.
 *
 * Coalescing: per session at most one turn is owed and not started (a "batch"). A message is
 * journaled under the session's transcript lock, and in the same critical section it joins the
 * waiting batch or creates one; a turn, under the same lock, marks its batch started and reads the
 * accepted messages. So every message is answered by exactly the turn whose future `send` returned.
 */
import { Cause, Deferred, Effect, Exit, Option } from "effect"
import type { Scope } from "effect"
import { AdmissionError, RequestError } from "../queue/index.js"
import type { CommandQueue } from "../queue/index.js"
import { makeAnswer } from "./answer.js"
import type { AnswerDeps } from "./answer.js"
import { cronSession } from "./CronJobs.js"
import type { ParsedCronJob } from "./CronJobs.js"
import type { TurnResult } from "./events.js"
import { HEARTBEAT_SESSION } from "./Heartbeat.js"
import { makeRetries } from "./retries.js"
import type { UnansweredSession } from "./retries.js"
import { checkSend, isReservedSession } from "./sendChecks.js"
import { classify, errorText } from "./turnErrors.js"
import type { TurnError } from "./types.js"

type TurnFuture = CommandQueue.Future<TurnResult, TurnError>

interface Batch {
  readonly session: string
  /** Set when its turn read the accepted messages (or was dropped): nothing may join any more. */
  started: boolean
  /** Messages accepted into this batch (to forget them if the queue refuses the turn). */
  readonly seqs: Array<number>
  readonly future: Deferred.Deferred<TurnFuture, AdmissionError | RequestError>
}

interface Deps extends AnswerDeps {
  readonly queue: CommandQueue.CommandQueue
  readonly defaultSession: string
  /** The delivery log's record limit: larger messages are refused, larger replies split. */
  readonly maxRecordBytes: number
  /** At most this many accepted messages per model call (default: all). */
  readonly maxMessagesPerTurn?: number
  /** Where retry timers live (closed with the agent). */
  readonly scope: Scope.Scope
  /** A turn failed on the disk or the log (the agent starts watching the log's health). */
  readonly onIoFailure?: () => void
}

/** Builds the turn machinery of one agent. */
export const makeTurns = (deps: Deps) => {
  const { emit, transcripts } = deps
  const { answer, flushUnsent } = makeAnswer(deps)
  const waiting = new Map<string, Batch>()
  /** User turns admitted and not ended, per session (to resume their sessions after `restartLane("main")`). */
  const owed = new Map<string, number>()
  let lastActive = deps.defaultSession
  let closed = false

  const release = (batch: Batch) => {
    batch.started = true
    if (waiting.get(batch.session) === batch) waiting.delete(batch.session)
  }

  const max = deps.maxMessagesPerTurn ?? Infinity
  const retries = makeRetries({ scope: deps.scope, kick: (session) => resume([session]) })

  const userTurn = (batch: Batch): Effect.Effect<TurnResult, TurnError> =>
    Effect.gen(function*() {
      const session = batch.session
      const state = yield* transcripts.load(session, () => release(batch))
      yield* flushUnsent(session, state)
      if (state.pending.length === 0) {
        return { session, kind: "user", turn: 0, text: "", messages: 0, suppressed: false } satisfies TurnResult
      }
      const taken = state.pending.length > max ? state.pending.slice(0, max) : state.pending
      const result = yield* answer({
        kind: "user",
        session,
        state,
        user: taken.map((m) => m.text),
        answered: taken.map((m) => m.seq),
        to: () => session
      })
      // `maxMessagesPerTurn`: the rest go to the next turn (unless a new message already made one).
      if (taken.length < state.pending.length) yield* resume([session])
      return result
    })

  /** After a user turn ended: forget a failure, or record it and schedule the retry; report it. */
  const turnEnded = (session: string, exit: Exit.Exit<TurnResult, unknown>) =>
    Effect.gen(function*() {
      if (Exit.isSuccess(exit)) return yield* retries.succeeded(session)
      const error = Option.getOrUndefined(Cause.findErrorOption(exit.cause)) ?? Cause.squash(exit.cause)
      if (Cause.hasInterruptsOnly(exit.cause)) return // a shutdown or a cancel: nothing to report or retry
      const c = classify(error)
      if (c.ignore) return // stale (restartLane resumes the session) or closed (shutting down)
      const messages = transcripts.pendingCounts().get(session) ?? 0
      if (c.final) {
        yield* retries.succeeded(session)
        emit({ type: "turn-failed", kind: "user", session, error: c.text, messages, retryable: false, kept: false })
        return
      }
      const delay = yield* retries.failed(session, c.text, c.retryable, c.io)
      if (c.io) deps.onIoFailure?.()
      emit({
        type: "turn-failed",
        kind: "user",
        session,
        error: c.text,
        messages,
        retryable: c.retryable,
        kept: true,
        ...(delay === undefined ? {} : { retryInMs: delay })
      })
    })

  /** Dispatches the turn of a batch; settles the batch's future with the outcome of `dispatch`. */
  const dispatchBatch = (batch: Batch, coalesce = true) =>
    Effect.gen(function*() {
      const session = batch.session
      const exit = yield* Effect.exit(
        deps.queue.dispatch("main", session, userTurn(batch), {
          coalesce,
          finalizer: (exit) =>
            Effect.suspend(() => {
              release(batch)
              const n = (owed.get(session) ?? 1) - 1
              if (n <= 0) owed.delete(session)
              else owed.set(session, n)
              return turnEnded(session, exit)
            })
        })
      )
      if (Exit.isSuccess(exit)) {
        if (exit.value.admission === "coalesced") {
          // Joined a task this batch does not own (its finalizer is not ours): let later messages start a new batch.
          release(batch)
        } else if (Option.isNone(yield* exit.value.poll)) {
          // The finalizer may have run already (a task that ended at once): count only what is still owed.
          owed.set(session, (owed.get(session) ?? 0) + 1)
        }
      }
      Deferred.doneUnsafe(batch.future, exit)
      if (Exit.isFailure(exit)) release(batch)
      return exit
    })

  const sendAll = (session: string, texts: ReadonlyArray<string>) =>
    Effect.gen(function*() {
      const bad = checkSend(session, texts, deps.maxRecordBytes)
      if (bad !== undefined) return yield* bad
      if (closed) return yield* new AdmissionError({ lane: "main", key: session, reason: "closed" })
      const slot: { joined?: Batch; created?: Batch; overflow?: boolean } = {}
      yield* transcripts.accept(session, texts, (added) => {
        const current = waiting.get(session)
        let batch: Batch
        // A batch holds at most `maxMessagesPerTurn`: past it, a new turn queues behind the waiting one.
        const fits = current !== undefined && (current.seqs.length === 0 || current.seqs.length + added.length <= max)
        if (current !== undefined && !current.started && fits) {
          batch = slot.joined = current
        } else {
          slot.overflow = current !== undefined && !current.started
          batch = slot.created = { session, started: false, seqs: [], future: Deferred.makeUnsafe() }
          waiting.set(session, batch)
        }
        for (const m of added) batch.seqs.push(m.seq)
      })
      lastActive = session
      if (slot.joined !== undefined) return yield* Deferred.await(slot.joined.future)
      const batch = slot.created!
      const exit = yield* dispatchBatch(batch, slot.overflow !== true)
      if (Exit.isFailure(exit)) {
        // Refused: the caller is told so, and the messages are not answered later either.
        yield* transcripts.drop(session, batch.seqs).pipe(Effect.ignore)
      }
      return yield* exit
    })

  const send = (session: string, text: string): ReturnType<typeof sendAll> =>
    typeof text === "string"
      ? sendAll(session, [text])
      : Effect.fail(
        new RequestError({
          lane: "main",
          key: String(session),
          message: `Expected \`text\` to be a string, got \`${typeof text}\``
        })
      )

  const heartbeatTurn = (prompt: string): Effect.Effect<TurnResult, TurnError> =>
    Effect.gen(function*() {
      const state = yield* transcripts.load(HEARTBEAT_SESSION)
      yield* flushUnsent(HEARTBEAT_SESSION, state)
      return yield* answer({
        kind: "heartbeat",
        session: HEARTBEAT_SESSION,
        state,
        user: [prompt],
        answered: [],
        to: () => lastActive
      })
    })

  const cronTurn = (job: ParsedCronJob): Effect.Effect<TurnResult, TurnError> =>
    Effect.gen(function*() {
      const session = cronSession(job.name)
      const state = yield* transcripts.load(session)
      yield* flushUnsent(session, state)
      return yield* answer({
        kind: "cron",
        session,
        state,
        user: [job.prompt],
        answered: [],
        job: job.name,
        to: () => job.to ?? lastActive
      })
    })

  /** On start: log the replies a crash left unlogged, and dispatch a turn for every session with accepted messages. */
  const recover = Effect.gen(function*() {
    const sessions = yield* transcripts.sessions
    let lastAt = -Infinity
    for (const session of sessions) {
      const loaded = yield* Effect.exit(Effect.tap(transcripts.load(session), (state) => flushUnsent(session, state)))
      if (Exit.isFailure(loaded)) {
        // One bad session must not keep the agent from starting; its file stays as it is.
        yield* Effect.logWarning(
          `switchyard: cannot recover session \`${session}\`: ${errorText(Cause.squash(loaded.cause))}`
        )
        continue
      }
      const state = loaded.value
      if (state.activeAt !== undefined && state.activeAt > lastAt && !isReservedSession(session)) {
        lastAt = state.activeAt
        lastActive = session
      }
      if (state.pending.length > 0) {
        const batch: Batch = { session, started: false, seqs: [], future: Deferred.makeUnsafe() }
        waiting.set(session, batch)
        const exit = yield* dispatchBatch(batch)
        if (Exit.isFailure(exit)) {
          yield* Effect.logWarning(
            `switchyard: cannot answer the accepted messages of \`${session}\` now: ${errorText(exit.cause)}`
          )
        }
      }
      if (state.unsent !== undefined || state.pending.length > 0) {
        emit({
          type: "recovered",
          session,
          messages: state.pending.length,
          replies: state.unsent === undefined ? 0 : 1
        })
      }
    }
  })

  /**
   * After `restartLane("main")` (or for a retry): the sessions keep their accepted messages;
   * dispatch a fresh turn for each (one that finds nothing to answer ends at once).
   */
  function resume(sessions: ReadonlyArray<string>): Effect.Effect<void> {
    return Effect.forEach(sessions, (session) => {
      const current = waiting.get(session)
      if (closed || (current !== undefined && !current.started)) return Effect.void
      const batch: Batch = { session, started: false, seqs: [], future: Deferred.makeUnsafe() }
      waiting.set(session, batch)
      return Effect.asVoid(dispatchBatch(batch))
    }, { discard: true })
  }

  /** Retries now (see `Agent.retry`): returns how many sessions got a turn. */
  const retry = (session?: string, only?: (io: boolean) => boolean): Effect.Effect<number> =>
    Effect.gen(function*() {
      if (closed) return 0
      if (
        session !== undefined && !transcripts.pendingCounts().has(session) && retries.failureOf(session) === undefined
      ) return 0
      const sessions = yield* retries.retry(session, only)
      yield* resume(sessions)
      return sessions.length
    })

  /** Sessions with messages accepted and not answered, and their failures. */
  const unanswered = (): ReadonlyArray<UnansweredSession> =>
    [...transcripts.pendingCounts()].map(([session, messages]) => {
      const failure = retries.failureOf(session)
      return failure === undefined ? { session, messages } : { session, messages, failure }
    })

  return {
    send,
    sendAll,
    resume,
    /** Sessions with user turns admitted and not ended. */
    sessionsOwed: (): ReadonlyArray<string> => [...owed.keys()],
    heartbeatTurn,
    cronTurn,
    recover,
    retry,
    unanswered,
    /** Whether a session failed on the disk or the log (then the log's health is worth watching). */
    anyIoFailure: retries.anyIo,
    /** Refuses every later `send` (a shutdown began) and stops the retry timers. */
    close: Effect.suspend(() => {
      closed = true
      return retries.close
    }),
    lastActiveSession: () => lastActive
  }
}
