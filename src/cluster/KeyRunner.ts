/**
 * The runner side of the cluster queue: the behaviour of one key entity (`<lane>/<key>`).
 *
 * effect/cluster keeps each entity on exactly one runner at a time (shard locks in Postgres) and hands
 * it the key's messages in order. The behaviour takes them from its mailbox one by one and admits each
 * `Run` into this runner's local `CommandQueue` (so lane limits, timeouts, coalescing, cancel and
 * reports are the single-process ones), then replies with the task's outcome. When the entity stops
 * (its shard moves, the runner shuts down) every local task of the key is canceled first, and runs
 * that did not finish get no reply: the cluster replays them on the key's next runner.
 */
import { Clock, Effect, Exit, Option, Queue, Schedule } from "effect"
import type { Scope } from "effect"
import { Layer } from "effect"
import { Entity } from "effect/cluster"
import type { Sharding } from "effect/cluster"
import type * as Envelope from "effect/cluster/Envelope"
import type { CommandQueue } from "../queue/CommandQueue.js"
import type { Participation } from "../queue/errors.js"
import type { Future } from "../queue/Future.js"
import * as Answers from "./Answers.js"
import { Fence } from "./Fencing.js"
import type { FenceToken } from "./Fencing.js"
import type { Generations } from "./Generations.js"
import { handlerMarksSlot, handlerWritesAnswer } from "./LaneHandler.js"
import type { LaneHandler } from "./LaneHandler.js"
import { KeyEntity } from "./protocol.js"
import type { Cancel, CancelKey, Run, RunNow, WireQueueFailure } from "./protocol.js"
import { isCanceled, isFenced, queueFailure, reportFenced, taskDefect, toReply } from "./RunOutcome.js"
import { ReplyCommits } from "./Storage.js"
import type { ReplyCommit } from "./Storage.js"
import * as Timing from "./Timing.js"
import * as VolatileRuns from "./VolatileRuns.js"

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

type Rpcs = typeof Run | typeof RunNow | typeof Cancel | typeof CancelKey
type RunPayload = typeof RunNow.payloadSchema.Type
type Req = Envelope.Request<Rpcs>

/** Most canceled run ids remembered per key before their `Run` arrives (oldest forgotten first). */
const MAX_EARLY_CANCELS = 1_000

/** Registers the key entity on this runner for the Scope's lifetime. */
export const register = (options: KeyRunnerOptions): Effect.Effect<void, never, Sharding.Sharding | Scope.Scope> =>
  Effect.flatMap(
    Effect.all([Effect.serviceOption(Fence), Effect.serviceOption(ReplyCommits)]),
    ([fence, commits]) => {
      // Answers of volatile runs sent lately by this runner, whichever entity (a duplicate may come after
      // the entity passivated).
      const recent = Answers.recent()
      return (
        Effect.asVoid(Layer.build(KeyEntity.toLayerQueue(
          Effect.map(Entity.CurrentAddress, (address) => (mailbox, replier) =>
            Effect.gen(function*() {
              const { local, generations, handlers } = options
              const shard = `${address.shardId.group}:${address.shardId.id}`
              const runs = new Map<string, Future<unknown, unknown>>()
              // The epoch each live run started under (when the runtime fences).
              const tokens = new Map<string, FenceToken>()
              const earlyCancels = new Set<string>()
              // Runs this entity canceled itself because it stops (not because a caller asked).
              const stoppedRuns = new Set<string>()
              // Runs that ended here whose writes wait to commit with their reply, by request id.
              const committing = new Map<string, { readonly runId: string; readonly token: FenceToken | undefined }>()
              // Runs admitted up to this time (epoch ms) were canceled by `cancel(lane, key)` before they arrived.
              let canceledBefore = 0

              // The replier is typed per RPC; this one function answers all of them, passing each exit through.
              const replyNow = (request: Req, exit: Exit.Exit<unknown, unknown>) =>
                replier.complete(request as never, exit as never)
              const volatile = VolatileRuns.make({ answers: options.answers, recent, fence, shard })
              /** Sends a run's answer; a volatile run's is stored first (VolatileRuns.ts). */
              const reply = (
                request: Req,
                exit: Exit.Exit<unknown, unknown>,
                p?: RunPayload,
                written = false
              ): Effect.Effect<void> =>
                p === undefined || request.tag !== "RunNow"
                  ? replyNow(request, exit)
                  : volatile.answer(p, exit, written, (out) => replyNow(request, out))
              const leave = (runId: string) => volatile.leave(runId)
              // A coalescing slot is used up when its run starts, or ends without starting: later coalescing
              // dispatches must not join a run that will never run.
              const consumeSlot = (p: RunPayload) =>
                p.coalesceSlot === undefined ? Effect.void : options.markStarted(p.lane, p.key, p.coalesceSlot).pipe(
                  Effect.catchCause((cause) => Effect.logWarning("Could not mark a coalescing slot started", cause))
                )
              const failWith = (
                request: Req,
                p: RunPayload,
                stage: WireQueueFailure["stage"],
                reason: WireQueueFailure["reason"]
              ) =>
                Effect.andThen(
                  consumeSlot(p),
                  reply(request, queueFailure(p, options.participation(p.lane), stage, reason), p)
                )

              const onRun = (request: Req, p: RunPayload) =>
                Effect.gen(function*() {
                  Timing.mark(p.runId, "onRun")
                  const isVolatile = request.tag === "RunNow"
                  // A volatile run it runs or answered is answered without running it again.
                  if (isVolatile && (yield* volatile.admit(p, (exit) => replyNow(request, exit)))) return
                  if (earlyCancels.delete(p.runId) || p.admittedAt <= canceledBefore) {
                    return yield* failWith(request, p, "queued", "canceled")
                  }
                  let generation = generations.current(p.lane)
                  if (p.generation > generation) {
                    generation = yield* Effect.orElseSucceed(generations.refresh(p.lane), () => generation)
                  }
                  if (p.generation < generation) {
                    return yield* failWith(request, p, "queued", "stale")
                  }
                  const handler = handlers[p.lane]
                  if (handler === undefined) {
                    return yield* reply(
                      request,
                      taskDefect("Error", `This runner has no handler for lane \`${p.lane}\``),
                      p
                    )
                  }
                  const now = yield* Clock.currentTimeMillis
                  const queueTimeout = p.queueTimeoutMs ?? options.queueTimeoutMs(p.lane)
                  const remaining = queueTimeout === undefined ? undefined : p.admittedAt + queueTimeout - now
                  if (remaining !== undefined && remaining <= 0) return yield* failWith(request, p, "queued", "timeout")
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
                  const selfMarks = p.coalesceSlot !== undefined && handlerMarksSlot(handler)
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
                    ...(isVolatile && p.replay === undefined && p.prefetched !== undefined ?
                      { prefetched: p.prefetched } :
                      {}),
                    ...(Option.isSome(commits) && !isVolatile ?
                      {
                        commitWithReply: (c: ReplyCommit) => {
                          commit = c
                        }
                      } :
                      {})
                  }).pipe(
                    Effect.tapError((e) =>
                      isFenced(e)
                        ? Effect.logWarning(
                          `fenced: run ${p.runId} of ${p.lane}/${p.key} dropped, its writes refused (${
                            e.message ?? `shard ${shard} has a newer epoch`
                          }); the shard's owner runs it`
                        )
                        : Effect.void
                    )
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
                    return yield* reply(request, taskDefect("RequestError", e.message), p)
                  }
                  const future = admitted.success
                  runs.set(p.runId, future)
                  if (token !== undefined) tokens.set(p.runId, token)
                  yield* Effect.exit(future.await).pipe(
                    Effect.flatMap((exit) => {
                      Timing.mark(p.runId, "taskEnd")
                      if (runs.get(p.runId) === future) {
                        runs.delete(p.runId)
                        tokens.delete(p.runId)
                      }
                      const out = Answers.alreadyAnswered(exit) === undefined
                        ? toReply(p, options.participation(p.lane), exit)
                        : exit
                      // A run canceled because the entity stops gets no reply: the key's next runner runs it.
                      // Any other outcome (also one reached while stopping) is the answer, saved as usual.
                      if (out === undefined || (stoppedRuns.has(p.runId) && isCanceled(out))) {
                        return Effect.sync(() => leave(p.runId))
                      }
                      if (commit !== undefined && Exit.isSuccess(out) && Option.isSome(commits)) {
                        // The handler's writes commit with this reply (Storage.ts), or not at all.
                        const requestId = String(request.requestId)
                        committing.set(requestId, { runId: p.runId, token })
                        commits.value.attach(requestId, {
                          commit,
                          address,
                          onTaken: () => committing.delete(requestId)
                        })
                      }
                      // A handler that writes its answer wrote it with its commit.
                      const answer = reply(request, out, p, Exit.isSuccess(out) && handlerWritesAnswer(handler))
                      return consumed ? answer : Effect.andThen(consumeSlot(p), answer)
                    }),
                    Effect.forkChild
                  )
                })

              const onCancel = (request: Req, runId: string) => {
                const future = runs.get(runId)
                if (future === undefined) {
                  if (earlyCancels.size >= MAX_EARLY_CANCELS) earlyCancels.delete(earlyCancels.values().next().value!)
                  earlyCancels.add(runId)
                  return reply(request, Exit.void)
                }
                return Effect.forkChild(Effect.andThen(future.cancel, reply(request, Exit.void)))
              }

              const loop = Effect.gen(function*() {
                while (true) {
                  const request = (yield* Queue.take(mailbox)) as Req
                  switch (request.tag) {
                    case "Run":
                    case "RunNow":
                      yield* onRun(request, request.payload as RunPayload)
                      break
                    case "Cancel":
                      yield* onCancel(request, (request.payload as { runId: string }).runId)
                      break
                    case "CancelKey": {
                      const p = request.payload as { lane: string; key: string; before: number }
                      canceledBefore = Math.max(canceledBefore, p.before)
                      yield* Effect.forkChild(Effect.andThen(
                        Effect.ignore(local.cancel(p.lane, p.key)),
                        reply(request, Exit.void)
                      ))
                      break
                    }
                  }
                }
              })

              return yield* loop.pipe(
                Effect.onInterrupt(() =>
                  Effect.suspend(() => {
                    // Stop answering: whatever did not end goes to the key's next runner. Cancel first, so
                    // no task of this key still runs here when the next runner starts it.
                    const live = [...runs.entries()]
                    for (const [runId] of live) stoppedRuns.add(runId)
                    const held = live.flatMap(([runId]) => {
                      const t = tokens.get(runId)
                      return t === undefined ? [] : [[runId, t] as const]
                    })
                    // Runs that ended here but whose writes had not committed with their reply: dropped.
                    for (const [requestId, c] of committing) {
                      if (Option.isSome(commits) && commits.value.detach(requestId) && c.token !== undefined) {
                        held.push([c.runId, c.token] as const)
                      }
                    }
                    committing.clear()
                    return Effect.forEach(live, ([, f]) => f.cancel, { concurrency: "unbounded", discard: true }).pipe(
                      // let the awaiters of runs that ended by themselves send their answers
                      Effect.andThen(Effect.yieldNow),
                      // A run stopped because another runner took the shard (this one stalled past its lease) was fenced too.
                      Effect.andThen(
                        held.length === 0 || Option.isNone(fence) ? Effect.void : reportFenced(fence.value, held)
                      )
                    )
                  })
                )
              ) as Effect.Effect<never>
            })),
          { maxIdleTime: "1 minute" }
        )))
      )
    }
  )
