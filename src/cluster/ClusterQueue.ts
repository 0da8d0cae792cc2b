/**
 * ClusterQueue: the command queue across processes, on effect/cluster over Postgres.
 *
 * `dispatch(lane, key, command)` persists a `Run` message to the entity `<lane>/<key>` and returns
 * once it is durable; the runner that holds the key's shard runs it in its local `CommandQueue` with
 * the lane's handler. A dispatch with an inbox message (the ingress's) is durable once its inbox row
 * committed, and its run goes as a volatile `RunNow` (Replay.ts says who runs it again, and when). Tasks cannot cross processes, so a dispatch names a command (a JSON value) and
 * every runner registers the same handlers per lane. What holds across processes and what does not
 * is written in docs/cluster.md.
 */
import { PgClient } from "@effect/sql-pg"
import { Deferred, Duration, Effect, Exit, Option, Schedule, Scope } from "effect"
import { EntityId, Sharding } from "effect/cluster"
import { SqlClient } from "effect/sql"
import * as CommandQueue from "../queue/CommandQueue.js"
import type { DrainReport, LaneLimits } from "../queue/CommandQueue.js"
import { AdmissionError, FutureTimeout, LanesConfigInvalid, QueueFailure, RequestError } from "../queue/errors.js"
import type { Participation } from "../queue/errors.js"
import * as Answers from "./Answers.js"
import type {
  ClusterDispatchOptions,
  ClusterFuture,
  ClusterQueue,
  ClusterQueueOptions,
  DrainOptions,
  RunNowPayload
} from "./ClusterQueueTypes.js"
import * as Coalesce from "./Coalesce.js"
import { Fence } from "./Fencing.js"
import * as Generations from "./Generations.js"
import * as KeyRunner from "./KeyRunner.js"
import * as LocalLanes from "./LocalLanes.js"
import * as Migrations from "./Migrations.js"
import { entityId, KeyEntity } from "./protocol.js"
import * as Replay from "./Replay.js"
import { runPayload, sendRun, sendVolatile } from "./send.js"
import * as Storage from "./Storage.js"
import { checkDispatch, DEFAULT_LANES, fromReply, transient } from "./wire.js"

export type {
  ClusterDispatchOptions,
  ClusterFuture,
  ClusterQueue,
  ClusterQueueOptions,
  DrainOptions,
  RunNowPayload
} from "./ClusterQueueTypes.js"
export type { ClusterTask, LaneHandler } from "./LaneHandler.js"

interface Outstanding {
  readonly id: number
  readonly lane: string
  readonly key: string
  readonly runId: string
  readonly deferred: Deferred.Deferred<unknown, unknown>
  readonly cancel: Effect.Effect<void>
}

/**
 * Starts the cluster queue on this runner for the Scope's lifetime: the local lanes, the shared
 * generations, and the key entity. Closing the Scope drains this process' dispatches, then the
 * local lanes (runs that did not finish are replayed on another runner), then leaves.
 */
export const make = (
  options: ClusterQueueOptions
): Effect.Effect<ClusterQueue, LanesConfigInvalid, Sharding.Sharding | PgClient.PgClient | Scope.Scope> =>
  Effect.gen(function*() {
    const member = options.member ?? `runner-${crypto.randomUUID().slice(0, 8)}`
    const lanes: Record<string, Partial<LaneLimits>> = {}
    for (const [name, limits] of Object.entries(DEFAULT_LANES)) lanes[name] = limits
    for (const [name, limits] of Object.entries(options.lanes ?? {})) lanes[name] = { ...lanes[name], ...limits }
    for (const name of Object.keys(lanes)) {
      if (name.length === 0 || name.includes("/")) {
        return yield* new LanesConfigInvalid({
          field: `lanes.${name}`,
          message: `Expected a lane name without \`/\`, got \`${name}\``
        })
      }
    }
    const restartTimeoutMs = options.restartTimeoutMs ?? 30_000
    const participation = (lane: string): Participation => lanes[lane]?.participation ?? "blocking"

    const local = yield* CommandQueue.make({
      lanes,
      ...(options.drainTimeoutMs === undefined ? {} : { drainTimeoutMs: options.drainTimeoutMs }),
      ...(options.auditTimeoutMs === undefined ? {} : { auditTimeoutMs: options.auditTimeoutMs }),
      ...(options.onTaskExit === undefined ? {} : { onTaskExit: options.onTaskExit })
    })
    // Its tables (ClusterLayer.layer created them already when the prefix is the same: then a no-op).
    yield* Migrations.migrate({ cluster: false, ...(options.prefix === undefined ? {} : { prefix: options.prefix }) })
      .pipe(
        Effect.provideService(SqlClient.SqlClient, yield* PgClient.PgClient),
        Effect.orDie
      )
    const generations = yield* Generations.make({
      member,
      ...(options.prefix === undefined ? {} : { prefix: options.prefix }),
      apply: (lane) => (lane in lanes ? Effect.asVoid(Effect.ignore(local.restartLane(lane))) : Effect.void)
    }).pipe(Effect.orDie)
    const coalescing = yield* Coalesce.make(options.prefix)
    const answers = yield* Answers.make(options.prefix)
    const keyRunner = yield* KeyRunner.register({
      answers,
      markStarted: coalescing.markStarted,
      local,
      generations,
      handlers: options.handlers,
      participation,
      queueTimeoutMs: (lane) => lanes[lane]?.queueTimeoutMs
    })
    const makeClient = yield* KeyEntity.client
    const saved = yield* Effect.serviceOption(Storage.Saved)
    const sharding = yield* Sharding.Sharding
    // Volatile runs need the fence: its acquisitions and held shards drive their replay (Replay.ts).
    const fence = yield* Effect.serviceOption(Fence)
    const replayStats = Option.isSome(fence)
      ? yield* Replay.start({
        fence: fence.value,
        answers,
        client: makeClient,
        ...(options.sweepMs === undefined ? {} : { sweepMs: options.sweepMs }),
        ...(options.sweepAgeMs === undefined ? {} : { sweepAgeMs: options.sweepAgeMs })
      })
      : () => ({ sweeps: 0, replayed: 0 })
    const resendMs = options.resendMs ?? 2_000
    // The fibers that wait for replies live in a scope that closes only after the drain below: a
    // fiber forked into the queue's own scope would be interrupted first (finalizers run newest first),
    // and the drain would wait for futures nobody settles.
    const scope = yield* Scope.fork(yield* Effect.scope)

    // `forwarded`: runs answered by the short way to their owner (options.forward); `local`: volatile runs
    // answered the local way (KeyRunner.ts `local`), this runner's own and those other runners forwarded.
    const counters: Record<string, number> = {
      dispatched: 0,
      succeeded: 0,
      failed: 0,
      queueFailures: 0,
      defects: 0,
      forwarded: 0,
      local: 0
    }
    const localRuns = options.localRuns !== false && Option.isSome(fence)
    /** A volatile run the local way; `undefined` when it was not answered here. */
    const runLocal = (p: RunNowPayload) =>
      Effect.tap(keyRunner.local(p), (exit) =>
        Effect.sync(() => {
          if (exit !== undefined) counters.local++
        }))
    // By future, not by run id: coalesced futures share their run's id.
    const outstanding = new Map<number, Outstanding>()
    let futureSeq = 0
    const outstandingPerLane = new Map<string, number>()
    let draining: Deferred.Deferred<DrainReport> | undefined
    // When the drain's deadline passes (epoch ms): closing the Scope drains the local lanes within it.
    let drainDeadline = 0

    const check = (lane: string, key: string, command: unknown, o: ClusterDispatchOptions | undefined) =>
      checkDispatch(lanes, lane, key, command, o)
    /** Maps the reply of a run onto the future's outcome, counting it. */
    const settleFrom = (lane: string, key: string, runId: string, exit: Exit.Exit<unknown, unknown>) => {
      const out = fromReply(lane, key, runId, exit)
      counters[out.kind]++
      return out.exit
    }

    const settle = (o: Outstanding, exit: Exit.Exit<unknown, unknown>) =>
      Effect.suspend(() => {
        if (outstanding.get(o.id) === o) {
          outstanding.delete(o.id)
          outstandingPerLane.set(o.lane, (outstandingPerLane.get(o.lane) ?? 1) - 1)
        }
        return Deferred.done(o.deferred, exit)
      })

    const dispatch = <A, E>(lane: string, key: string, command: unknown, o?: ClusterDispatchOptions) =>
      Effect.gen(function*() {
        const bad = check(lane, key, command, o)
        if (bad !== undefined) return yield* bad
        if (draining !== undefined) return yield* new AdmissionError({ lane, key, reason: "closed" })
        const limits = lanes[lane]
        const bound = (limits.concurrent ?? 1) + (limits.queued ?? 0)
        if ((outstandingPerLane.get(lane) ?? 0) >= bound && o?.coalesce !== true) {
          return yield* new AdmissionError({ lane, key, reason: "full" })
        }
        const generation = generations.current(lane)
        const id = entityId(lane, key)
        // The key's effect/cluster client, made when a send or a cancel needs it: a run that goes the local way
        // or the short way (Hop.ts) and is not canceled never does.
        let keyClient: ReturnType<typeof makeClient> | undefined
        const client = () => (keyClient ??= makeClient(id))
        // With an inbox message the run is volatile: its inbox row, with the entity's shard, is its durability.
        const volatile = o?.inbox !== undefined && o.coalesce === true && Option.isSome(fence)
        const shardId = volatile
          ? sharding.getShardId(EntityId.make(id), KeyEntity.getShardGroup(EntityId.make(id)))
          : undefined
        const withShard: ClusterDispatchOptions | undefined = shardId === undefined || o?.inbox === undefined ? o : {
          ...o,
          inbox: { ...o.inbox, shard: `${shardId.group}:${shardId.id}`, generation }
        }
        // The run's id: joining the key's waiting run (coalesce), the caller's, or a new one.
        const { joined, payload } = yield* runPayload({
          lane,
          key,
          generation,
          command,
          options: withShard,
          coalescing
        })
        const runId = payload.runId
        const deferred = Deferred.makeUnsafe<unknown, unknown>()
        let settled: Exit.Exit<unknown, unknown> | undefined
        const cancel = Effect.gen(function*() {
          yield* client().Cancel({ runId }).pipe(
            Effect.retry({ while: transient, schedule: Schedule.spaced("100 millis"), times: 50 }),
            Effect.ignore
          )
          yield* Effect.exit(Deferred.await(deferred))
        })
        const entry: Outstanding = { id: ++futureSeq, lane, key, runId, deferred, cancel }
        outstanding.set(entry.id, entry)
        outstandingPerLane.set(lane, (outstandingPerLane.get(lane) ?? 0) + 1)
        const settleWith = (exit: Exit.Exit<unknown, unknown>) => {
          settled = settleFrom(lane, key, runId, exit)
          return settle(entry, settled)
        }
        // Durable once this returns (the inbox row, or the saved Run); the reply settles the future later.
        if (volatile) {
          // The local way when this runner holds the shard; the short way to the shard's owner (Hop.ts) when
          // another runner holds it.
          const forward = shardId === undefined
            ? undefined
            : sharding.hasShardId(shardId)
            ? (localRuns ? runLocal : undefined)
            : options.forward === undefined
            ? undefined
            : (p: typeof payload) =>
              Effect.tap(options.forward!(`${shardId.group}:${shardId.id}`, p), (exit) =>
                Effect.sync(() => {
                  if (exit !== undefined) counters.forwarded++
                }))
          yield* sendVolatile({
            client: { RunNow: (p) => client().RunNow(p) },
            payload,
            scope,
            resendMs,
            onReply: settleWith,
            stored: answers.of,
            ...(forward ? { forward } : {})
          })
        } else yield* sendRun({ client: client(), entityId: id, payload, saved, scope, onReply: settleWith })
        counters.dispatched++
        const future: ClusterFuture<A, E> = {
          runId,
          lane,
          key,
          generation,
          admission: joined ? "coalesced" : "queued",
          await: Deferred.await(deferred) as Effect.Effect<A, E | QueueFailure>,
          poll: Effect.sync(() => Option.fromUndefinedOr(settled) as Option.Option<Exit.Exit<A, E | QueueFailure>>),
          awaitTimeout: (timeout) =>
            (Deferred.await(deferred) as Effect.Effect<A, E | QueueFailure>).pipe(
              Effect.timeoutOrElse({
                duration: timeout,
                orElse: () =>
                  Effect.fail(
                    new FutureTimeout({ runId, timeoutMs: Duration.toMillis(Duration.fromInputUnsafe(timeout)) })
                  )
              })
            ),
          cancel
        }
        return future
      })

    const knownLane = (lane: string) =>
      lane in lanes
        ? Effect.void
        : Effect.fail(new RequestError({ lane, key: "", message: `Unknown lane \`${lane}\`` }))

    const restartLane = (lane: string) =>
      Effect.gen(function*() {
        yield* knownLane(lane)
        const generation = yield* Effect.orDie(generations.bump(lane))
        const all = yield* Effect.orDie(generations.awaitApplied(lane, generation, restartTimeoutMs))
        if (!all) {
          yield* Effect.logWarning(
            `restartLane(${lane}): not every runner applied generation ${generation} within ${restartTimeoutMs} ms`
          )
        }
        return generation
      })

    const drain = (o?: DrainOptions): Effect.Effect<DrainReport> =>
      Effect.suspend(() => {
        if (draining !== undefined) return Deferred.await(draining)
        const done = Deferred.makeUnsafe<DrainReport>()
        draining = done
        const timeoutMs = o?.timeoutMs ?? options.drainTimeoutMs ?? 30_000
        drainDeadline = Date.now() + timeoutMs
        const before = [...outstanding.values()]
        return Effect.gen(function*() {
          const all = Effect.forEach(before, (x) => Effect.exit(Deferred.await(x.deferred)), {
            concurrency: "unbounded",
            discard: true
          })
          const finished = yield* all.pipe(
            Effect.as(true),
            Effect.timeoutOrElse({ duration: Duration.millis(timeoutMs), orElse: () => Effect.succeed(false) })
          )
          let canceled = 0
          if (!finished) {
            yield* Effect.forEach([...outstanding.values()], (x) =>
              Effect.gen(function*() {
                // Stop it where it runs (unless its run is kept); its future fails `closed` whatever the runner answers.
                if (o?.keepRuns !== true) {
                  yield* x.cancel.pipe(
                    Effect.timeoutOrElse({ duration: Duration.seconds(5), orElse: () => Effect.void })
                  )
                }
                const exit = yield* Deferred.poll(x.deferred)
                if (Option.isNone(exit) || Exit.isFailure(yield* Effect.exit(exit.value))) {
                  canceled++
                  yield* settle(
                    x,
                    Exit.fail(
                      new QueueFailure({
                        runId: x.runId,
                        lane: x.lane,
                        key: x.key,
                        participation: participation(x.lane),
                        stage: "queued",
                        reason: "closed"
                      })
                    )
                  )
                }
              }), { concurrency: "unbounded", discard: true })
          }
          const report: DrainReport = { completed: before.length - canceled, canceled, timedOut: !finished }
          yield* Deferred.succeed(done, report)
          return report
        })
      })

    // Closing: this process' dispatches first, then the local lanes (unfinished runs are replayed
    // elsewhere), both within the one drain deadline.
    yield* Effect.addFinalizer(() =>
      Effect.andThen(
        drain(),
        Effect.suspend(() => Effect.asVoid(local.drain({ timeoutMs: Math.max(0, drainDeadline - Date.now()) })))
      )
    )

    const queue: ClusterQueue = {
      member,
      dispatch,
      restartLane,
      restartAll: Effect.asVoid(
        Effect.forEach(Object.keys(lanes), (l) => Effect.orDie(restartLane(l)), { discard: true })
      ),
      generation: (lane) => Effect.as(knownLane(lane), generations.current(lane)),
      cancel: (lane, key) =>
        Effect.gen(function*() {
          yield* knownLane(lane)
          if (key.length === 0) {
            return yield* new RequestError({ lane, key, message: "Expected `key` to be a non-empty string, got ``" })
          }
          yield* makeClient(entityId(lane, key)).CancelKey({ lane, key, before: Date.now() }).pipe(
            Effect.retry({ while: transient, schedule: Schedule.spaced("100 millis"), times: 50 }),
            Effect.orDie
          )
        }),
      drain,
      snapshot: Effect.map(
        local.snapshot,
        (lanesNow) =>
          lanesNow.map((l) => ({
            ...l,
            generation: generations.current(l.lane),
            draining: l.draining || draining !== undefined
          }))
      ),
      ...LocalLanes.controls(local, lanes),
      members: Effect.orDie(generations.members),
      runNow: (p) =>
        Effect.flatMap(
          localRuns ? runLocal(p) : Effect.succeed(undefined),
          (exit) =>
            exit !== undefined ? Effect.succeed(exit) : Effect.exit(makeClient(entityId(p.lane, p.key)).RunNow(p))
        ),
      counters: Effect.sync(() => {
        const replay = replayStats()
        return { ...counters, outstanding: outstanding.size, replaySweeps: replay.sweeps, replayed: replay.replayed }
      })
    }
    return queue
  })
