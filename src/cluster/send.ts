/**
 * Sending a run to its key's entity: durable before the dispatch returns, its reply awaited in the
 * background (see Storage.ts for why one send does both).
 */
import { Cause, Deferred, Duration, Effect, Exit, Fiber, Option, Schedule } from "effect"
import type { Scope } from "effect"
import type { Coalesce, InboxMessage } from "./Coalesce.js"
import { KeyEntity } from "./protocol.js"
import type { Run, RunNow } from "./protocol.js"
import * as Storage from "./Storage.js"
import * as Timing from "./Timing.js"
import { transient } from "./wire.js"

/**
 * The `Run` of a dispatch: with `coalesce`, the key's waiting run joined (same run id: the cluster
 * dedupes it) or the next slot opened, in one statement (or in one transaction with `beforeSend`);
 * otherwise the caller's run id or a new one, after `beforeSend`.
 */
export const runPayload = (options: {
  readonly lane: string
  readonly key: string
  readonly generation: number
  readonly command: unknown
  readonly coalescing: Coalesce
  readonly options:
    | {
      readonly coalesce?: boolean
      readonly runId?: string
      readonly queueTimeoutMs?: number
      readonly turnTimeoutMs?: number
      readonly beforeSend?: (runId: string) => Effect.Effect<void, unknown>
      readonly inbox?: InboxMessage
    }
    | undefined
}): Effect.Effect<{ readonly payload: typeof RunNow.payloadSchema.Type; readonly joined: boolean }> =>
  Effect.gen(function*() {
    const { command, generation, key, lane, options: o } = options
    const payloadFor = (runId: string, coalesceSlot: number | undefined): typeof RunNow.payloadSchema.Type => ({
      runId,
      lane,
      key,
      generation,
      command,
      admittedAt: Date.now(),
      ...(coalesceSlot === undefined ? {} : { coalesceSlot }),
      ...(o?.queueTimeoutMs === undefined ? {} : { queueTimeoutMs: o.queueTimeoutMs }),
      ...(o?.turnTimeoutMs === undefined ? {} : { turnTimeoutMs: o.turnTimeoutMs })
    })
    const before = (runId: string) => o?.beforeSend === undefined ? Effect.void : Effect.orDie(o.beforeSend(runId))
    if (o?.coalesce === true) {
      const slot = yield* Effect.orDie(
        o.beforeSend === undefined
          ? options.coalescing.slot(lane, key, o.inbox)
          : options.coalescing.withSlot(lane, key, (slot) => Effect.as(before(slot.runId), slot))
      )
      const payload = payloadFor(slot.runId, slot.slot)
      // Started by its slot statement (an idle session): the turn needs no read of its own.
      return {
        payload: slot.started === undefined ? payload : { ...payload, startedRaw: slot.started },
        joined: slot.joined
      }
    }
    const payload = payloadFor(o?.runId ?? crypto.randomUUID(), undefined)
    yield* before(payload.runId)
    return { payload, joined: false }
  })

/** What {@link sendRun} needs of the key's client (`KeyEntity.client(id)`). */
export interface RunClient {
  readonly Run: (
    payload: typeof Run.payloadSchema.Type,
    options?: { readonly discard?: boolean }
  ) => Effect.Effect<unknown, unknown>
}

/**
 * Sends `payload` to entity `entityId` and returns once the run is durable in the cluster's message
 * table; `onReply` gets the run's outcome later, in a fiber of `scope`. With the storage's {@link Storage.Saved}
 * it is one send; without (an effect/cluster runtime of the caller's own), one send with `discard`
 * (returns once saved) and a second one to await the reply (deduplicated by the run id).
 */
export const sendRun = (options: {
  readonly client: RunClient
  readonly entityId: string
  readonly payload: typeof Run.payloadSchema.Type
  readonly saved: Option.Option<Storage.SavedShape>
  readonly scope: Scope.Scope
  readonly onReply: (exit: Exit.Exit<unknown, unknown>) => Effect.Effect<void>
}): Effect.Effect<void> =>
  Effect.gen(function*() {
    const { client, payload, saved, scope } = options
    Timing.mark(payload.runId, "slotDone")
    if (Option.isNone(saved)) {
      yield* client.Run(payload, { discard: true }).pipe(
        Effect.retry({ while: transient, schedule: Schedule.spaced("100 millis"), times: 50 }),
        Effect.orDie
      )
      yield* client.Run(payload).pipe(
        Effect.retry({ while: transient, schedule: Schedule.spaced("200 millis") }),
        Effect.exit,
        Effect.flatMap(options.onReply),
        Effect.forkIn(scope)
      )
      return
    }
    // The reply comes back to this send the direct way: a local reply handler, or the key's runner over
    // its socket (no polling of the reply table).
    const wait = saved.value.await(Storage.primaryKeyOf(KeyEntity.type, options.entityId, "Run", payload.runId))
    let durable = false
    let attempts = 0
    const sent = yield* client.Run(payload).pipe(
      // Before it is durable, as many tries as a dispatch waits for; after, for as long as it takes.
      Effect.retry({
        while: (e) => transient(e) && (durable || ++attempts <= 50),
        schedule: Schedule.spaced("100 millis")
      }),
      Effect.exit,
      Effect.tap((exit) => {
        Timing.mark(payload.runId, "replied")
        return options.onReply(exit)
      }),
      Effect.ensuring(Effect.sync(wait.release)),
      Effect.forkIn(scope)
    )
    // The send ending first means it never saved the run (it gave up): the dispatch fails as a defect.
    const ended = yield* Effect.raceFirst(Effect.as(wait.saved, undefined), Fiber.join(sent))
    if (ended !== undefined && Exit.isFailure(ended)) return yield* Effect.die(Cause.squash(ended.cause))
    durable = true
    Timing.mark(payload.runId, "saved")
  })

/** What {@link sendVolatile} needs of the key's client. */
export interface RunNowClient {
  readonly RunNow: (payload: typeof RunNow.payloadSchema.Type) => Effect.Effect<unknown, unknown>
}

/** Whether a reply is the run's answer (its outcome), not the transport's failure. */
const isAnswer = (exit: Exit.Exit<unknown, unknown>): boolean => {
  if (Exit.isSuccess(exit)) return true
  const failure = exit.cause.reasons.find((r) => r._tag === "Fail")
  const tag = failure !== undefined && failure._tag === "Fail" ? (failure.error as { _tag?: string })?._tag : undefined
  return tag === "QueueFailure" || tag === "TaskFailed" || tag === "TaskDefect"
}

/**
 * Sends `payload` as a volatile run (`RunNow`) and keeps sending it until it has its answer; `onReply` gets
 * it, in a fiber of `scope`. The run is durable before this is called (its inbox row, Replay.ts), so
 * nothing here waits: a send that ends without an answer (its runner died, or stopped the entity) is sent
 * again after 100 ms, and while one waits longer than `resendMs` another goes out (its runner may be
 * stalled, and the shard's new owner answers it; the owner recognises the run by its id and answers the
 * run it already runs or answered, so a second send never runs it twice).
 */
export const sendVolatile = (options: {
  readonly client: RunNowClient
  readonly payload: typeof RunNow.payloadSchema.Type
  readonly scope: Scope.Scope
  readonly resendMs: number
  readonly onReply: (exit: Exit.Exit<unknown, unknown>) => Effect.Effect<void>
  /**
   * The first send's shorter way to the run's owner (Hop.ts): its answer, or `undefined` to send it the
   * usual way at once.
   */
  readonly forward?: (
    payload: typeof RunNow.payloadSchema.Type
  ) => Effect.Effect<Exit.Exit<unknown, unknown> | undefined>
  /**
   * The run's answer as its owner stored it (the inbox, `Answers.of`), or `undefined`: read before each
   * send again, so a dispatcher whose sends reach no owner for a while (its own runner stalled and woke,
   * and effect/cluster routes the key's sends nowhere until the shard changes hands back) has the answer
   * once the owner committed it, instead of once the routing settles (16 s after a 12 s SIGSTOP).
   */
  readonly stored?: (runId: string) => Effect.Effect<Exit.Exit<unknown, unknown> | undefined, unknown>
}): Effect.Effect<void> =>
  Effect.gen(function*() {
    const { client, forward, payload } = options
    Timing.mark(payload.runId, "slotDone")
    const answered = Deferred.makeUnsafe<Exit.Exit<unknown, unknown>>()
    // Wakes the loop: an answer (whichever send's), or the time for the next send. One per send; an answer
    // wakes the current one.
    let wake = Deferred.makeUnsafe<void>()
    const viaCluster = (again: boolean) =>
      Effect.exit(client.RunNow(again ? { ...payload, replay: "dispatcher" } : payload))
    const stored = options.stored
    // A send again: the stored answer if the owner has committed one, else the send.
    // Made when a send again happens, not at every dispatch (most runs are answered by their first send).
    const again = () =>
      stored === undefined ? viaCluster(true) : Effect.flatMap(
        Effect.orElseSucceed(stored(payload.runId), () => undefined),
        (exit) => exit !== undefined && isAnswer(exit) ? Effect.succeed(exit) : viaCluster(true)
      )
    // A send, then (no answer) the next one 100 ms after it ended, or `resendMs` after it began if it waits.
    // Two fibers per send, no race: the local way's send is answered at once, and every message takes it.
    const attempt = (resent: boolean, next: Deferred.Deferred<void>) =>
      Effect.exit(
        resent ? again() : forward === undefined
          ? viaCluster(false)
          : Effect.flatMap(forward(payload), (exit) => exit === undefined ? viaCluster(false) : Effect.succeed(exit))
      ).pipe(
        Effect.flatMap((sent) => {
          if (Exit.isSuccess(sent) && isAnswer(sent.value)) {
            Deferred.doneUnsafe(answered, Exit.succeed(sent.value))
            Deferred.doneUnsafe(wake, Exit.void)
            return Effect.void
          }
          return Effect.andThen(Effect.sleep("100 millis"), Deferred.succeed(next, undefined))
        })
      )
    const resend = Duration.millis(options.resendMs)
    const loop = Effect.gen(function*() {
      for (let n = 0;; n++) {
        const next = wake
        // Children of this fiber: the sends still waiting are interrupted (here only) once it has the answer.
        yield* Effect.forkChild(attempt(n > 0, next))
        yield* Effect.forkChild(Effect.andThen(Effect.sleep(resend), Deferred.succeed(next, undefined)))
        yield* Deferred.await(next)
        if (Deferred.isDoneUnsafe(answered)) return yield* Deferred.await(answered)
        wake = Deferred.makeUnsafe<void>()
      }
    })
    yield* loop.pipe(
      Effect.tap(() => Effect.sync(() => Timing.mark(payload.runId, "replied"))),
      Effect.flatMap(options.onReply),
      Effect.forkIn(options.scope)
    )
  })
