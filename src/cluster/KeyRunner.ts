/**
 * The runner side of the cluster queue: the key entity (`<lane>/<key>`) as effect/cluster runs it.
 *
 * effect/cluster keeps each entity on exactly one runner at a time (shard locks in Postgres) and hands
 * it the key's messages in order. The behaviour takes them from its mailbox one by one and admits each
 * `Run` into this runner's local `CommandQueue` (KeyRun.ts: so lane limits, timeouts, coalescing, cancel
 * and reports are the single-process ones), then replies with the task's outcome. When the entity stops
 * (its shard moves, the runner shuts down) every local task of the key is canceled first, and runs
 * that did not finish get no reply: the cluster replays them on the key's next runner.
 *
 * A key's state (KeyState.ts) is shared with the local way (LocalWay.ts): volatile runs of keys whose
 * shard this runner holds, admitted without effect/cluster's send.
 */
import { Effect, Exit, Layer, Option, Queue } from "effect"
import type { Scope } from "effect"
import { Entity, Sharding } from "effect/cluster"
import type { FenceToken } from "./Fencing.js"
import { Fence } from "./Fencing.js"
import { makeOnRun } from "./KeyRun.js"
import type { KeyRunnerOptions } from "./KeyRun.js"
import { cancelEarly, makeKeys, stopRuns } from "./KeyState.js"
import type { Req, RunPayload, Sink } from "./KeyState.js"
import * as LocalWay from "./LocalWay.js"
import { KeyEntity } from "./protocol.js"
import { ReplyCommits } from "./Storage.js"
import type { ReplyCommit } from "./Storage.js"

export type { KeyRunnerOptions } from "./KeyRun.js"

/** The runner side of the key entities. */
export interface KeyRunner {
  /**
   * Runs a volatile run (`RunNow`) of a key whose shard this runner holds without effect/cluster's send
   * (its sharding, entity manager, mailbox and replier): admitted into the local lane as the key's entity
   * would, and recognised by its id by the entity too. The run's answer, or `undefined` when it was not
   * answered here (this runner does not hold the shard, or let it go meanwhile, or the run was fenced): the
   * caller then sends it the usual way, and the key's owner answers it (a run is never run twice).
   */
  readonly local: LocalWay.LocalRun
}

/** Registers the key entity on this runner for the Scope's lifetime. */
export const register = (
  options: KeyRunnerOptions
): Effect.Effect<KeyRunner, never, Sharding.Sharding | Scope.Scope> =>
  Effect.gen(function*() {
    const fence = yield* Effect.serviceOption(Fence)
    const commits = yield* Effect.serviceOption(ReplyCommits)
    const sharding = yield* Sharding.Sharding
    const { local } = options
    const keys = makeKeys({ answers: options.answers, fence })
    const onRun = makeOnRun(options, fence, commits)
    const localRun = yield* LocalWay.start({ fence, sharding, keys, onRun })

    yield* Layer.build(KeyEntity.toLayerQueue(
      Effect.map(Entity.CurrentAddress, (address) => (mailbox, replier) =>
        Effect.gen(function*() {
          const id = address.entityId as string
          const key = keys.acquire(id, `${address.shardId.group}:${address.shardId.id}`)
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
              cancelEarly(key, runId)
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
                // The entity's own runs; local runs are stopped when their shard is let go (LocalWay.ts), not when
                // the entity passivates.
                return stopRuns(fence, key, (isLocal) => !isLocal, extra)
              }).pipe(Effect.ensuring(Effect.sync(() => keys.release(id, key))))
            )
          ) as Effect.Effect<never>
        })),
      { maxIdleTime: "1 minute" }
    ))

    return { local: localRun }
  })
