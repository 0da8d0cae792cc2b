/**
 * The volatile runs (protocol.ts `RunNow`) of one key entity: a run is recognised by its id, so a run
 * sent again (by its dispatcher, the acquisition replay, the sweep: Replay.ts) is never run twice; and a
 * run's answer is stored in its inbox rows before it is sent (Answers.ts), so the sweep does not run an
 * answered run again. KeyRun.ts runs the rest of a run as it does a persisted `Run`.
 */
import { Deferred, Effect, Exit, Option, Schedule } from "effect"
import * as Answers from "./Answers.js"
import type { FenceShape, FenceToken } from "./Fencing.js"
import type { RunNow } from "./protocol.js"

type RunPayload = typeof RunNow.payloadSchema.Type
type Reply = (exit: Exit.Exit<unknown, unknown>) => Effect.Effect<void>

/** The volatile runs of one entity. */
export interface VolatileRuns {
  /**
   * True when `p` was answered here (a run this entity runs, answered lately, or, sent again, answered
   * before; `"owner"` replays of such a run get an empty answer at once) or is not this runner's (it holds
   * no epoch of the shard); false when the caller is to run it (it is pending from now on).
   */
  readonly admit: (p: RunPayload, reply: Reply) => Effect.Effect<boolean>
  /**
   * Sends the answer of a pending run, stored first (unless its handler's commit wrote it, `written`, or it
   * was stored before) under the epoch it arrived at. Not stored (fenced, or Postgres failing): no answer,
   * the run stays unanswered for its shard's owner, the dispatcher's next send or the sweep.
   */
  readonly answer: (
    p: RunPayload,
    exit: Exit.Exit<unknown, unknown>,
    written: boolean,
    reply: Reply
  ) => Effect.Effect<void>
  /** The pending run ends without an answer here (it is left to the key's next runner). */
  readonly leave: (runId: string) => void
}

export const make = (options: {
  readonly answers: Answers.Answers
  readonly recent: Answers.Recent
  readonly fence: Option.Option<FenceShape>
  /** The entity's shard, `group:id`. */
  readonly shard: string
}): VolatileRuns => {
  const { answers, fence, recent, shard } = options
  // Between a run's arrival and its answer (or none), with the shard's epoch when it arrived.
  const pending = new Map<
    string,
    {
      readonly answer: Deferred.Deferred<Exit.Exit<unknown, unknown> | undefined>
      readonly token: FenceToken | undefined
    }
  >()
  const settle = (runId: string, exit: Exit.Exit<unknown, unknown> | undefined) => {
    const entry = pending.get(runId)
    if (entry === undefined) return
    pending.delete(runId)
    Deferred.doneUnsafe(entry.answer, Exit.succeed(exit))
  }
  return {
    admit: (p, reply) =>
      Effect.gen(function*() {
        const live = pending.get(p.runId)
        if (live !== undefined) {
          if (p.replay === "owner") return yield* Effect.as(reply(Exit.void), true)
          yield* Effect.forkChild(
            Effect.flatMap(Deferred.await(live.answer), (exit) => exit === undefined ? Effect.void : reply(exit))
          )
          return true
        }
        let answered = recent.get(p.runId)
        if (answered === undefined && p.replay !== undefined) {
          answered = yield* Effect.orElseSucceed(answers.of(p.runId), () => undefined)
          if (answered !== undefined) recent.set(p.runId, answered)
        }
        if (answered !== undefined) return yield* Effect.as(reply(p.replay === "owner" ? Exit.void : answered), true)
        const epoch = Option.isSome(fence) ? fence.value.epochOf(shard) : undefined
        // No epoch: this runner does not hold the shard (any more); its owner runs the run.
        if (Option.isSome(fence) && epoch === undefined) return true
        pending.set(p.runId, {
          answer: Deferred.makeUnsafe(),
          token: epoch === undefined ? undefined : { shard, epoch }
        })
        return false
      }),
    answer: (p, exit, written, reply) => {
      const stored = Answers.alreadyAnswered(exit)
      const out = stored ?? exit
      const token = pending.get(p.runId)?.token
      const mark = stored !== undefined || written
        ? Effect.succeed(true)
        : answers.mark(p.runId, out, token).pipe(Effect.retry({ times: 3, schedule: Schedule.spaced("200 millis") }))
      return mark.pipe(
        Effect.matchCauseEffect({
          onFailure: (cause) => {
            settle(p.runId, undefined)
            return Effect.logWarning(`Could not store the answer of run ${p.runId}; it stays unanswered`, cause)
          },
          onSuccess: (ok) => {
            if (!ok) {
              settle(p.runId, undefined)
              return Effect.logWarning(
                `fenced: run ${p.runId} of ${p.lane}/${p.key} not answered here: shard ${shard} has a newer epoch than ${token?.epoch}; the shard's owner answers it`
              )
            }
            recent.set(p.runId, out)
            settle(p.runId, out)
            return reply(out)
          }
        })
      )
    },
    leave: (runId) => settle(runId, undefined)
  }
}
