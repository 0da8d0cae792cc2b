/**
 * The durability of volatile runs (protocol.ts `RunNow`): the ingress's messages are not saved by
 * effect/cluster; their inbox rows, committed before the message is accepted, record the run id, the key
 * entity's shard and the lane's generation (Coalesce.ts, migration 0007), and keep the run's answer once
 * it has one (Answers.ts). So the shard's owner runs what is unanswered:
 *
 * - **at acquisition**: once this runner bumped the fencing epochs of shards it acquired (Fencing.ts),
 *   every unanswered run of those shards is sent to its key's entity here (in order of its first message,
 *   one after the other per key). A run whose turn ran on the shard's previous owner but did not commit
 *   runs again (that owner's commit is refused by the epoch); one that committed before the bump is
 *   answered, so it is not sent.
 * - **on a sweep** every `sweepMs`: the unanswered runs of the shards this runner holds whose first message
 *   is older than `sweepAgeMs` (a send that was lost: its dispatcher died between the accept and the send).
 *
 * These sends say `replay: "owner"`: a run its entity already runs, or answered, is not run again and the
 * answer is empty (nobody here waits for it; its dispatcher, if alive, has its own send).
 */
import { Cause, Duration, Effect, Queue, Schedule } from "effect"
import type { Scope } from "effect"
import type { Answers, UnansweredRun } from "./Answers.js"
import type { FenceShape } from "./Fencing.js"
import { entityId } from "./protocol.js"
import type { RunNowClient } from "./send.js"
import { transient } from "./wire.js"

/** Options of {@link start}. */
export interface ReplayOptions {
  readonly fence: FenceShape
  readonly answers: Answers
  readonly client: (entityId: string) => RunNowClient
  /** How often the sweep runs; default 2_000 ms. */
  readonly sweepMs?: number
  /** How old an unanswered run's first message must be for the sweep to send it; default 5_000 ms. */
  readonly sweepAgeMs?: number
}

/** Lane, key and slot of a coalescing run id (`coalesce:<lane>:<key>:<slot>`), or `undefined`. */
export const parseRunId = (
  runId: string
): { readonly lane: string; readonly key: string; readonly slot: number } | undefined => {
  const m = /^coalesce:([^:]+):(.+):(\d+)$/.exec(runId)
  return m === null ? undefined : { lane: m[1], key: m[2], slot: Number(m[3]) }
}

/** Sends each run of `runs` to its entity, one after the other per key; returns once all were answered. */
const send = (client: ReplayOptions["client"], runs: ReadonlyArray<UnansweredRun>) => {
  const byKey = new Map<
    string,
    Array<UnansweredRun & { readonly lane: string; readonly key: string; readonly slot: number }>
  >()
  for (const r of runs) {
    const parsed = parseRunId(r.runId)
    if (parsed === undefined) continue
    const id = entityId(parsed.lane, parsed.key)
    const list = byKey.get(id) ?? []
    list.push({ ...r, ...parsed })
    byKey.set(id, list)
  }
  return Effect.forEach(
    byKey,
    ([id, list]) =>
      Effect.forEach(list, (r) =>
        client(id).RunNow({
          runId: r.runId,
          lane: r.lane,
          key: r.key,
          generation: r.generation,
          // The command of an inbox run (ClusterAgent's `MessageCommand`): its messages are its inbox rows.
          command: { type: "message", session: r.session, text: r.text, inbox: true },
          admittedAt: r.receivedAt,
          coalesceSlot: r.slot,
          replay: "owner"
        }).pipe(
          Effect.retry({ while: transient, schedule: Schedule.spaced("100 millis"), times: 20 }),
          Effect.ignore
        ), { discard: true }),
    { concurrency: "unbounded", discard: true }
  )
}

/** What the replay did so far (for `/status` and `/metrics`). */
export interface ReplayStats {
  /** Sweeps that read the unanswered inbox (each read that succeeded, whether or not it found a run). */
  readonly sweeps: number
  /** Runs sent to their keys by an acquisition replay or a sweep. */
  readonly replayed: number
}

/** Runs the acquisition replay and the sweep for the Scope's lifetime; returns a reader of its counts. */
export const start = (options: ReplayOptions): Effect.Effect<() => ReplayStats, never, Scope.Scope> =>
  Effect.gen(function*() {
    let sweeps = 0
    let replayed = 0
    const { answers, fence } = options
    const scope = yield* Effect.scope
    const sweepMs = options.sweepMs ?? 2_000
    const sweepAgeMs = options.sweepAgeMs ?? 5_000
    const acquired = yield* Queue.unbounded<ReadonlyArray<string>>()
    const off = fence.onAcquired((shards) => {
      if (shards.length > 0) Queue.offerUnsafe(acquired, shards)
    })
    yield* Effect.addFinalizer(() => Effect.sync(off))
    const replay = (what: string, shards: ReadonlyArray<string>, before: number, sweep = false) =>
      Effect.flatMap(answers.unanswered(shards, before), (runs) => {
        // Both counts move together, in one step, so a reader never sees a sweep without its sends.
        if (sweep) sweeps++
        replayed += runs.length
        return runs.length === 0 ? Effect.void : Effect.andThen(
          Effect.logInfo(`replay: ${runs.length} unanswered run(s) ${what} sent to their keys`),
          // Not waited for: the next acquisition or sweep must not wait for these runs' turns.
          Effect.forkIn(send(options.client, runs), scope)
        )
      }).pipe(
        // One line (Postgres out of reach would print a stack trace every sweep); the sweep reads it again.
        Effect.catchCause((cause) =>
          Effect.logWarning(
            `replay: could not read the unanswered inbox (the next sweep reads it again, in ${sweepMs} ms): ${
              Cause.pretty(cause).split("\n")[0]
            }`
          )
        )
      )
    yield* Effect.forever(
      Effect.flatMap(Queue.take(acquired), (shards) => replay("of acquired shards", shards, Number.MAX_SAFE_INTEGER))
    ).pipe(Effect.forkScoped)
    yield* Effect.forever(
      Effect.andThen(
        Effect.sleep(Duration.millis(sweepMs)),
        Effect.suspend(() =>
          replay(`found by the sweep (older than ${sweepAgeMs} ms)`, fence.held(), Date.now() - sweepAgeMs, true)
        )
      )
    ).pipe(Effect.forkScoped)
    return () => ({ sweeps, replayed })
  })
