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
import { Clock, Deferred, Effect, Exit, Layer, Option, Queue, Schedule } from "effect"
import type { Scope } from "effect"
import { Entity, EntityId, Sharding } from "effect/cluster"
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
import { entityId, KeyEntity } from "./protocol.js"
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

/** Where a run came from, and how its answer goes back. */
interface Sink {
  readonly tag: "Run" | "RunNow"
  /** Sends the run's answer (the entity's replier, or the local caller's deferred). */
  readonly complete: (exit: Exit.Exit<unknown, unknown>) => Effect.Effect<void>
  /** The entity's request, for a handler's commit that rides on its saved reply; none on the local way. */
  readonly request?: Req
  /** Runs the wait for the run's end where it belongs (the entity's fiber, or the runner's scope). */
  readonly fork: (effect: Effect.Effect<void>) => Effect.Effect<unknown>
}

/**
 * One key's runs on this runner, shared by its entity (when effect/cluster started it) and the local way
 * (runs this runner's ingress hands straight to the local lane, {@link KeyRunner.local}): a run is
 * recognised by its id whichever way it came, and a cancel reaches it whichever way that came.
 */
interface KeyState {
  readonly shard: string
  /** The entity, while it lives, and each local run in flight. */
  refs: number
  readonly runs: Map<string, { readonly future: Future<unknown, unknown>; readonly local: boolean }>
  // The epoch each live run started under (when the runtime fences).
  readonly tokens: Map<string, FenceToken>
  readonly earlyCancels: Set<string>
  // Runs canceled here because their entity or shard stops (not because a caller asked).
  readonly stoppedRuns: Set<string>
  // Runs admitted up to this time (epoch ms) were canceled by `cancel(lane, key)` before they arrived.
  canceledBefore: number
  readonly volatile: VolatileRuns.VolatileRuns
}

/** The runner side of the key entities. */
export interface KeyRunner {
  /**
   * Runs a volatile run (`RunNow`) of a key whose shard this runner holds without effect/cluster's send
   * (its sharding, entity manager, mailbox and replier): admitted into the local lane as the key's entity
   * would, and recognised by its id by the entity too. The run's answer, or `undefined` when it was not
   * answered here (this runner does not hold the shard, or let it go meanwhile, or the run was fenced): the
   * caller then sends it the usual way, and the key's owner answers it (a run is never run twice).
   */
  readonly local: (p: RunPayload) => Effect.Effect<Exit.Exit<unknown, unknown> | undefined>
}

/** Registers the key entity on this runner for the Scope's lifetime. */
export const register = (
  options: KeyRunnerOptions
): Effect.Effect<KeyRunner, never, Sharding.Sharding | Scope.Scope> =>
  Effect.gen(function*() {
    const fence = yield* Effect.serviceOption(Fence)
    const commits = yield* Effect.serviceOption(ReplyCommits)
    const sharding = yield* Sharding.Sharding
    const runnerScope = yield* Effect.scope
    const { local, generations, handlers } = options
    // Answers of volatile runs sent lately by this runner, whichever entity (a duplicate may come after
    // the entity passivated).
    const recent = Answers.recent()
    const keys = new Map<string, KeyState>()
    const acquire = (id: string, shard: string): KeyState => {
      let state = keys.get(id)
      if (state === undefined) {
        state = {
          shard,
          refs: 0,
          runs: new Map(),
          tokens: new Map(),
          earlyCancels: new Set(),
          stoppedRuns: new Set(),
          canceledBefore: 0,
          volatile: VolatileRuns.make({ answers: options.answers, recent, fence, shard })
        }
        keys.set(id, state)
      }
      state.refs++
      return state
    }
    const release = (id: string, state: KeyState) => {
      if (--state.refs === 0 && keys.get(id) === state) keys.delete(id)
    }

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

    /**
     * Admits `p` into the local lane and forks the wait for its end (`sink.fork`); returns once admitted
     * (or answered, or left). `onEnd` runs when the run is done here, answered or not.
     */
    const onRun = (
      key: KeyState,
      sink: Sink,
      p: RunPayload,
      hooks: {
        readonly attach?: (commit: ReplyCommit, runId: string, token: FenceToken | undefined) => void
        readonly onEnd?: () => void
      } = {}
    ): Effect.Effect<void> =>
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
          ...(Option.isSome(commits) && hooks.attach !== undefined && !isVolatile ?
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

    /** Cancels the runs of `key` that `which` picks, as their entity or shard stops; reports those fenced. */
    const stopRuns = (
      key: KeyState,
      which: (local: boolean) => boolean,
      extra: Array<readonly [string, FenceToken]>,
      report = true
    ) =>
      Effect.suspend(() => {
        // Stop answering: whatever did not end goes to the key's next runner. Cancel first, so no task of
        // this key still runs here when the next runner starts it.
        const live = [...key.runs.entries()].filter(([, r]) => which(r.local))
        for (const [runId] of live) key.stoppedRuns.add(runId)
        const held = live.flatMap(([runId]) => {
          const t = key.tokens.get(runId)
          return t === undefined ? [] : [[runId, t] as const]
        })
        held.push(...extra)
        return Effect.forEach(live, ([, r]) => r.future.cancel, { concurrency: "unbounded", discard: true }).pipe(
          // let the awaiters of runs that ended by themselves send their answers
          Effect.andThen(Effect.yieldNow),
          // A run stopped because another runner took the shard (this one stalled past its lease) was fenced too.
          Effect.andThen(
            !report || held.length === 0 || Option.isNone(fence) ? Effect.void : reportFenced(fence.value, held)
          )
        )
      })

    // Local runs of shards this runner lets go are stopped before their locks go, as their entities are.
    if (Option.isSome(fence)) {
      const remove = fence.value.beforeRelease((shards) =>
        Effect.forEach(
          [...keys.values()].filter((k) => shards === "all" || shards.includes(k.shard)),
          // At shutdown (`"all"`) no other runner took the shards: nothing to report as fenced.
          (k) => stopRuns(k, (isLocal) => isLocal, [], shards !== "all"),
          { concurrency: "unbounded", discard: true }
        )
      )
      yield* Effect.addFinalizer(() => Effect.sync(remove))
    }

    yield* Layer.build(KeyEntity.toLayerQueue(
      Effect.map(Entity.CurrentAddress, (address) => (mailbox, replier) =>
        Effect.gen(function*() {
          const id = address.entityId as string
          const key = acquire(id, `${address.shardId.group}:${address.shardId.id}`)
          // Runs that ended here whose writes wait to commit with their reply, by request id.
          const committing = new Map<string, { readonly runId: string; readonly token: FenceToken | undefined }>()
          const sinkOf = (request: Req): Sink => ({
            tag: request.tag === "RunNow" ? "RunNow" : "Run",
            request,
            // The replier is typed per RPC; this one function answers all of them, passing each exit through.
            complete: (exit) => replier.complete(request as never, exit as never),
            fork: Effect.forkChild
          })
          const attachTo = (request: Req) => (commit: ReplyCommit, runId: string, token: FenceToken | undefined) => {
            if (Option.isNone(commits)) return
            // The handler's writes commit with this reply (Storage.ts), or not at all.
            const requestId = String(request.requestId)
            committing.set(requestId, { runId, token })
            commits.value.attach(requestId, { commit, address, onTaken: () => committing.delete(requestId) })
          }

          const onCancel = (request: Req, runId: string) => {
            const run = key.runs.get(runId)
            const sink = sinkOf(request)
            if (run === undefined) {
              if (key.earlyCancels.size >= MAX_EARLY_CANCELS) {
                key.earlyCancels.delete(key.earlyCancels.values().next().value!)
              }
              key.earlyCancels.add(runId)
              return sink.complete(Exit.void)
            }
            return Effect.forkChild(Effect.andThen(run.future.cancel, sink.complete(Exit.void)))
          }

          const loop = Effect.gen(function*() {
            while (true) {
              const request = (yield* Queue.take(mailbox)) as Req
              switch (request.tag) {
                case "Run":
                case "RunNow":
                  yield* onRun(key, sinkOf(request), request.payload as RunPayload, { attach: attachTo(request) })
                  break
                case "Cancel":
                  yield* onCancel(request, (request.payload as { runId: string }).runId)
                  break
                case "CancelKey": {
                  const p = request.payload as { lane: string; key: string; before: number }
                  key.canceledBefore = Math.max(key.canceledBefore, p.before)
                  yield* Effect.forkChild(Effect.andThen(
                    Effect.ignore(local.cancel(p.lane, p.key)),
                    sinkOf(request).complete(Exit.void)
                  ))
                  break
                }
              }
            }
          })

          return yield* loop.pipe(
            Effect.onInterrupt(() =>
              Effect.suspend(() => {
                // Runs that ended here but whose writes had not committed with their reply: dropped.
                const extra: Array<readonly [string, FenceToken]> = []
                for (const [requestId, c] of committing) {
                  if (Option.isSome(commits) && commits.value.detach(requestId) && c.token !== undefined) {
                    extra.push([c.runId, c.token] as const)
                  }
                }
                committing.clear()
                // The entity's own runs; local runs are stopped when their shard is let go (above), not when
                // the entity passivates.
                return stopRuns(key, (isLocal) => !isLocal, extra)
              }).pipe(Effect.ensuring(Effect.sync(() => release(id, key))))
            )
          ) as Effect.Effect<never>
        })),
      { maxIdleTime: "1 minute" }
    ))

    const localRun = (p: RunPayload): Effect.Effect<Exit.Exit<unknown, unknown> | undefined> =>
      Effect.suspend(() => {
        const id = entityId(p.lane, p.key)
        const shardId = sharding.getShardId(EntityId.make(id), KeyEntity.getShardGroup(EntityId.make(id)))
        const shard = `${shardId.group}:${shardId.id}`
        // Only a shard held both by effect/cluster and by the fence (epoch bumped, not let go): its release
        // waits for what starts here (Fencing.ts `beforeRelease`).
        if (Option.isNone(fence) || !fence.value.holds(shard) || !sharding.hasShardId(shardId)) {
          return Effect.succeed(undefined)
        }
        const key = acquire(id, shard)
        const answered = Deferred.makeUnsafe<Exit.Exit<unknown, unknown> | undefined>()
        let ended = false
        const sink: Sink = {
          tag: "RunNow",
          complete: (exit) => Effect.sync(() => Deferred.doneUnsafe(answered, Exit.succeed(exit))),
          fork: (effect) => Effect.forkIn(effect, runnerScope)
        }
        const onEnd = () => {
          if (ended) return
          ended = true
          release(id, key)
          // No answer sent here (left, fenced): the caller sends the run the usual way.
          Deferred.doneUnsafe(answered, Exit.succeed(undefined))
        }
        return Effect.andThen(
          onRun(key, sink, p, { onEnd }).pipe(
            Effect.onExit((exit) => Exit.isFailure(exit) ? Effect.sync(onEnd) : Effect.void)
          ),
          Deferred.await(answered)
        )
      })

    return { local: localRun }
  })
