/**
 * A run's outcome on its key's runner, as the cluster's reply (KeyRunner.ts): the local task's exit mapped
 * onto the wire failures of protocol.ts, and which outcomes get no reply here (the run is left to the key's
 * next runner: fenced, drained, interrupted because the entity stops).
 */
import { Cause, Effect, Exit, Option } from "effect"
import type { Participation } from "../queue/errors.js"
import type { FenceShape, FenceToken } from "./Fencing.js"
import type { Run, WireQueueFailure, WireTaskDefect } from "./protocol.js"

type RunPayload = typeof Run.payloadSchema.Type

/** A handler's failure saying its writes were refused by a newer fencing epoch (Fencing.ts). */
export const isFenced = (e: unknown): e is { readonly _tag: "Fenced"; readonly message?: string } =>
  e !== null && typeof e === "object" && (e as { _tag?: unknown })._tag === "Fenced"

/** Logs `fenced` for the runs of `held` whose shard now has a newer epoch than the one they started under. */
export const reportFenced = (fence: FenceShape, held: ReadonlyArray<readonly [string, FenceToken]>) =>
  Effect.forEach(
    held,
    ([runId, t]) =>
      Effect.flatMap(fence.current(t.shard), (now) =>
        now !== undefined && now > t.epoch
          ? Effect.logWarning(
            `fenced: run ${runId} dropped before its commit: shard ${t.shard} is at epoch ${now}, this runner's was ${t.epoch}; the shard's owner runs it`
          )
          : Effect.void),
    { discard: true }
  ).pipe(
    Effect.timeoutOrElse({ duration: "2 seconds", orElse: () => Effect.void }),
    Effect.ignore
  )

/** Whether a reply is the failure `canceled` of the queue. */
export const isCanceled = (exit: Exit.Exit<unknown, unknown>): boolean =>
  Exit.isFailure(exit) &&
  exit.cause.reasons.some((r) =>
    r._tag === "Fail" && (r.error as { _tag?: string; reason?: string })._tag === "QueueFailure" &&
    (r.error as { reason?: string }).reason === "canceled"
  )

/** The wire failure `QueueFailure` of run `p` at `stage`. */
export const queueFailure = (
  p: RunPayload,
  participation: Participation,
  stage: WireQueueFailure["stage"],
  reason: WireQueueFailure["reason"]
): Exit.Exit<never, WireQueueFailure> =>
  Exit.fail({ _tag: "QueueFailure", runId: p.runId, lane: p.lane, key: p.key, participation, stage, reason })

/** The wire failure `TaskDefect` with `name` and `message`. */
export const taskDefect = (name: string, message: string): Exit.Exit<never, WireTaskDefect> =>
  Exit.fail({ _tag: "TaskDefect", name, message } satisfies WireTaskDefect)

/** The local outcome as the cluster reply; `undefined` when the run must be left for the next runner. */
export const toReply = (
  p: RunPayload,
  participation: Participation,
  exit: Exit.Exit<unknown, unknown>
): Exit.Exit<unknown, unknown> | undefined => {
  if (Exit.isSuccess(exit)) return exit
  const failure = Cause.findErrorOption(exit.cause)
  if (Option.isSome(failure)) {
    // Fenced: another runner took the shard while this one stalled; it runs the run, not us.
    if (isFenced(failure.value)) return undefined
    const e = failure.value as {
      _tag?: string
      stage?: WireQueueFailure["stage"]
      reason?: WireQueueFailure["reason"]
    }
    if (
      e !== null && typeof e === "object" && e._tag === "QueueFailure" && e.reason !== undefined &&
      e.stage !== undefined
    ) {
      // closed: this runner drains; the run goes to the key's next runner instead of failing.
      if (e.reason === "closed") return undefined
      return queueFailure(p, participation, e.stage, e.reason)
    }
    return Exit.fail({ _tag: "TaskFailed", error: failure.value })
  }
  if (Cause.hasInterruptsOnly(exit.cause)) return undefined
  const defect = exit.cause.reasons.find((r) => r._tag === "Die")
  const d = defect !== undefined && defect._tag === "Die" ? defect.defect : Cause.squash(exit.cause)
  return taskDefect(d instanceof Error ? d.name : "Defect", d instanceof Error ? d.message : String(d))
}
