/**
 * A run reaching its key on this runner, whichever way it came (the key's entity, KeyRunner.ts, or the
 * local way, LocalWay.ts): checked (early cancel, `cancel(lane, key)`, generation, handler, queue timeout,
 * the shard's fencing epoch), admitted into this runner's local `CommandQueue` (so lane limits, timeouts,
 * coalescing, cancel and reports are the single-process ones), and answered through its {@link Sink} when
 * it ends; a run canceled because its entity or shard stops, or fenced, gets no answer here.
 */
import { Clock, Effect, Exit, Option, Schedule } from "effect"
import type { CommandQueue } from "../queue/CommandQueue.js"
import type { Participation } from "../queue/errors.js"
import * as Answers from "./Answers.js"
import { parseStarted } from "./Coalesce.js"
import type { FenceShape, FenceToken } from "./Fencing.js"
import type { Generations } from "./Generations.js"
import type { KeyState, RunPayload, Sink } from "./KeyState.js"
import { handlerMarksSlot, handlerWritesAnswer } from "./LaneHandler.js"
import type { LaneHandler } from "./LaneHandler.js"
import type { WireQueueFailure } from "./protocol.js"
import { isCanceled, isFenced, queueFailure, taskDefect, toReply } from "./RunOutcome.js"
import type { ReplyCommit, ReplyCommitsShape } from "./Storage.js"
import * as Timing from "./Timing.js"

/** What the behaviour needs from the queue it belongs to. */
export interface KeyRunnerOptions {
  readonly local: CommandQueue
  readonly generations: Generations
  readonly handlers: Readonly<Record<string, LaneHandler>>
  readonly participation: (lane: string) => Participation
  readonly queueTimeoutMs: (lane: string) => number | undefined
  /** Marks a coalescing slot started (see Coalesce.ts), before the run is admitted here. */
  readonly markStarted: (lane: string, key: string, slot: number) => Effect.Effect<void, unknown>
  /** The inbox's answers, for volatile runs (`RunNow`; Answers.ts). */
  readonly answers: Answers.Answers
}

/** What the entity adds to a run: its handler's commit rides on the entity's saved reply. */
export interface RunHooks {
  readonly attach?: (commit: ReplyCommit, runId: string, token: FenceToken | undefined) => void
  readonly onEnd?: () => void
}

/**
 * Admits `p` into the local lane and forks the wait for its end (`sink.fork`); returns once admitted
 * (or answered, or left). `hooks.onEnd` runs when the run is done here, answered or not.
 */
export type OnRun = (key: KeyState, sink: Sink, p: RunPayload, hooks?: RunHooks) => Effect.Effect<void>

export const makeOnRun = (
  options: KeyRunnerOptions,
  fence: Option.Option<FenceShape>,
  commits: Option.Option<ReplyCommitsShape>
): OnRun => {
  const { local, generations, handlers } = options
  /** Sends a run's answer; a volatile run's is stored first (VolatileRuns.ts). */
  const reply = (
    key: KeyState,
    sink: Sink,
    exit: Exit.Exit<unknown, unknown>,
    p?: RunPayload,
    written = false
  ): Effect.Effect<void> =>
    p === undefined || sink.tag !== "RunNow"
      ? sink.complete(exit)
      : key.volatile.answer(p, exit, written, sink.complete)
  // A coalescing slot is used up when its run starts, or ends without starting: later coalescing
  // dispatches must not join a run that will never run.
  const consumeSlot = (p: RunPayload) =>
    p.coalesceSlot === undefined ? Effect.void : options.markStarted(p.lane, p.key, p.coalesceSlot).pipe(
      Effect.catchCause((cause) => Effect.logWarning("Could not mark a coalescing slot started", cause))
    )
  const failWith = (
    key: KeyState,
    sink: Sink,
    p: RunPayload,
    stage: WireQueueFailure["stage"],
    reason: WireQueueFailure["reason"]
  ) =>
    Effect.andThen(
      consumeSlot(p),
      reply(key, sink, queueFailure(p, options.participation(p.lane), stage, reason), p)
    )

  const onRun: OnRun = (key, sink, p, hooks = {}) =>
    Effect.gen(function*() {
      Timing.mark(p.runId, "onRun")
      const { shard } = key
      const end = Effect.sync(() => hooks.onEnd?.())
      const leave = (runId: string) => {
        key.volatile.leave(runId)
        hooks.onEnd?.()
      }
      const isVolatile = sink.tag === "RunNow"
      // A volatile run it runs or answered is answered without running it again.
      if (isVolatile && (yield* key.volatile.admit(p, sink.complete))) return yield* end
      if (key.earlyCancels.delete(p.runId) || p.admittedAt <= key.canceledBefore) {
        return yield* Effect.andThen(failWith(key, sink, p, "queued", "canceled"), end)
      }
      let generation = generations.current(p.lane)
      if (p.generation > generation) {
        generation = yield* Effect.orElseSucceed(generations.refresh(p.lane), () => generation)
      }
      if (p.generation < generation) {
        return yield* Effect.andThen(failWith(key, sink, p, "queued", "stale"), end)
      }
      const handler = handlers[p.lane]
      if (handler === undefined) {
        return yield* Effect.andThen(
          reply(key, sink, taskDefect("Error", `This runner has no handler for lane \`${p.lane}\``), p),
          end
        )
      }
      const now = yield* Clock.currentTimeMillis
      const queueTimeout = p.queueTimeoutMs ?? options.queueTimeoutMs(p.lane)
      const remaining = queueTimeout === undefined ? undefined : p.admittedAt + queueTimeout - now
      if (remaining !== undefined && remaining <= 0) {
        return yield* Effect.andThen(failWith(key, sink, p, "queued", "timeout"), end)
      }
      let token: FenceToken | undefined
      if (Option.isSome(fence)) {
        const epoch = fence.value.epochOf(shard)
        // No epoch: this runner does not hold the shard (any more); its owner runs the run.
        if (epoch === undefined) {
          leave(p.runId)
          return yield* Effect.logWarning(
            `fenced: run ${p.runId} of ${p.lane}/${p.key} not started, this runner holds no epoch of shard ${shard}`
          )
        }
        token = { shard, epoch }
      }
      const fenced = (e: { readonly message?: string }) =>
        Effect.andThen(
          Effect.logWarning(
            `fenced: run ${p.runId} of ${p.lane}/${p.key} dropped, its writes refused (${
              e.message ?? `shard ${shard} has a newer epoch`
            }); the shard's owner runs it`
          ),
          // The shard is another runner's now: start nothing more of it here until it comes back.
          token === undefined || Option.isNone(fence) ? Effect.void : Effect.flatMap(
            fence.value.lost(token.shard, token.epoch),
            (forgot) =>
              forgot && token !== undefined
                ? Effect.logWarning(
                  `fenced: shard ${token.shard} has a newer epoch than this runner's ${token.epoch}; no run of it starts here until this runner acquires it again`
                )
                : Effect.void
          )
        )
      const selfMarks = p.coalesceSlot !== undefined && handlerMarksSlot(handler)
      // Its history parsed here, once, where the turn runs (a runner of an older version sends `prefetched`).
      const prefetched = !isVolatile || p.replay !== undefined
        ? undefined
        : p.startedRaw !== undefined
        ? parseStarted(p.startedRaw)
        : p.prefetched
      let commit: ReplyCommit | undefined
      const run = handler({
        runId: p.runId,
        lane: p.lane,
        key: p.key,
        generation: p.generation,
        command: p.command,
        admittedAt: p.admittedAt,
        ...(token === undefined ? {} : { fence: token }),
        ...(selfMarks ? { coalesceSlot: p.coalesceSlot } : {}),
        // Started by its slot statement; a send again reads what is stored instead.
        ...(prefetched === undefined ? {} : { prefetched }),
        ...(Option.isSome(commits) && hooks.attach !== undefined && !isVolatile ?
          {
            commitWithReply: (c: ReplyCommit) => {
              commit = c
            }
          } :
          {})
      }).pipe(
        Effect.tapError((e) => isFenced(e) ? fenced(e) : Effect.void)
      )
      // A coalescing slot is marked started when the task starts here (not when it is admitted):
      // until then, coalescing dispatches of the key join it.
      // Marked once: when the task starts here, or when it ends without having started.
      let consumed = false
      const task = p.coalesceSlot === undefined
        ? run
        : selfMarks
        ? Effect.andThen(
          Effect.sync(() => {
            consumed = true
          }),
          // The handler marks the slot; if it failed (maybe before it did), mark it here.
          Effect.onExit(run, (exit) => Exit.isFailure(exit) ? consumeSlot(p) : Effect.void)
        )
        : Effect.andThen(
          Effect.andThen(
            consumeSlot(p),
            Effect.sync(() => {
              consumed = true
            })
          ),
          run
        )
      const timed = Timing.enabled
        ? Effect.andThen(Effect.sync(() => Timing.mark(p.runId, "taskStart")), task)
        : task
      const admitted = yield* local.dispatch(p.lane, p.key, timed, {
        ...(remaining === undefined ? {} : { queueTimeoutMs: Math.max(1, Math.round(remaining)) }),
        ...(p.turnTimeoutMs === undefined ? {} : { turnTimeoutMs: p.turnTimeoutMs })
      }).pipe(
        // full: this runner holds `concurrent + queued` of the lane; the run waits in the key's mailbox.
        Effect.retry({
          while: (e) => e._tag === "AdmissionError" && e.reason === "full",
          schedule: Schedule.spaced("20 millis")
        }),
        Effect.result
      )
      if (admitted._tag === "Failure") {
        const e = admitted.failure
        // closed: the runner drains; no reply, so the run is replayed on the key's next runner.
        if (e._tag === "AdmissionError") return leave(p.runId)
        return yield* Effect.andThen(reply(key, sink, taskDefect("RequestError", e.message), p), end)
      }
      const future = admitted.success
      const entry = { future, local: sink.request === undefined }
      key.runs.set(p.runId, entry)
      if (token !== undefined) key.tokens.set(p.runId, token)
      const forget = () => {
        if (key.runs.get(p.runId) === entry) {
          key.runs.delete(p.runId)
          key.tokens.delete(p.runId)
        }
      }
      yield* sink.fork(
        Effect.exit(future.await).pipe(
          // Interrupted (its scope closes at shutdown): nothing left to stop or report of it.
          Effect.onInterrupt(() => Effect.sync(forget)),
          Effect.flatMap((exit) => {
            Timing.mark(p.runId, "taskEnd")
            forget()
            const out = Answers.alreadyAnswered(exit) === undefined
              ? toReply(p, options.participation(p.lane), exit)
              : exit
            // A run canceled because its entity or shard stops gets no reply: the key's next runner runs it.
            // Any other outcome (also one reached while stopping) is the answer, saved as usual.
            if (out === undefined || (key.stoppedRuns.delete(p.runId) && isCanceled(out))) {
              return Effect.sync(() => leave(p.runId))
            }
            if (commit !== undefined && Exit.isSuccess(out)) hooks.attach?.(commit, p.runId, token)
            // A handler that writes its answer wrote it with its commit.
            const answer = reply(key, sink, out, p, Exit.isSuccess(out) && handlerWritesAnswer(handler))
            return Effect.ensuring(consumed ? answer : Effect.andThen(consumeSlot(p), answer), end)
          })
        )
      )
    })
  return onRun
}
