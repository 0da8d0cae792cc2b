/**
 * One key's runs on this runner, shared by the key's entity (KeyRunner.ts, when effect/cluster started it)
 * and the local way (LocalWay.ts): which runs are live and under which fencing epoch, the cancels that came
 * before their run, and how each run's answer goes back (its {@link Sink}). A run is recognised by its id
 * whichever way it came, and a cancel reaches it whichever way that came.
 */
import { Effect, Option } from "effect"
import type { Exit } from "effect"
import type * as Envelope from "effect/cluster/Envelope"
import type { Future } from "../queue/Future.js"
import * as Answers from "./Answers.js"
import type { FenceShape, FenceToken } from "./Fencing.js"
import type { Cancel, CancelKey, Run, RunNow } from "./protocol.js"
import { reportFenced } from "./RunOutcome.js"
import * as VolatileRuns from "./VolatileRuns.js"

type Rpcs = typeof Run | typeof RunNow | typeof Cancel | typeof CancelKey
export type RunPayload = typeof RunNow.payloadSchema.Type
export type Req = Envelope.Request<Rpcs>

/** Most canceled run ids remembered per key before their `Run` arrives (oldest forgotten first). */
const MAX_EARLY_CANCELS = 1_000

/** Where a run came from, and how its answer goes back. */
export interface Sink {
  readonly tag: "Run" | "RunNow"
  /** Sends the run's answer (the entity's replier, or the local caller's deferred). */
  readonly complete: (exit: Exit.Exit<unknown, unknown>) => Effect.Effect<void>
  /** The entity's request, for a handler's commit that rides on its saved reply; none on the local way. */
  readonly request?: Req
  /** Runs the wait for the run's end where it belongs (the entity's fiber, or the runner's scope). */
  readonly fork: (effect: Effect.Effect<void>) => Effect.Effect<unknown>
}

/** One key's runs on this runner (see the module's comment). */
export interface KeyState {
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

/** The keys this runner holds state of, by entity id (`<lane>/<key>`), each held while someone uses it. */
export interface Keys {
  /** The key's state, made if none; held until {@link Keys.release}. */
  readonly acquire: (id: string, shard: string) => KeyState
  readonly release: (id: string, state: KeyState) => void
  /** The keys of `shards` (all keys for `"all"`). */
  readonly ofShards: (shards: ReadonlyArray<string> | "all") => ReadonlyArray<KeyState>
}

export const makeKeys = (options: {
  readonly answers: Answers.Answers
  readonly fence: Option.Option<FenceShape>
}): Keys => {
  const { answers, fence } = options
  // Answers of volatile runs sent lately by this runner, whichever entity (a duplicate may come after
  // the entity passivated).
  const recent = Answers.recent()
  const keys = new Map<string, KeyState>()
  return {
    acquire: (id, shard) => {
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
          volatile: VolatileRuns.make({ answers, recent, fence, shard })
        }
        keys.set(id, state)
      }
      state.refs++
      return state
    },
    release: (id, state) => {
      if (--state.refs === 0 && keys.get(id) === state) keys.delete(id)
    },
    ofShards: (shards) => [...keys.values()].filter((k) => shards === "all" || shards.includes(k.shard))
  }
}

/** Remembers a cancel of `runId` that came before its run (which then fails `canceled` when it arrives). */
export const cancelEarly = (key: KeyState, runId: string): void => {
  if (key.earlyCancels.size >= MAX_EARLY_CANCELS) {
    key.earlyCancels.delete(key.earlyCancels.values().next().value!)
  }
  key.earlyCancels.add(runId)
}

/**
 * Cancels the runs of `key` that `which` picks (by whether they came the local way), as their entity or
 * shard stops; with `report`, reports those fenced, and the runs of `extra` too.
 */
export const stopRuns = (
  fence: Option.Option<FenceShape>,
  key: KeyState,
  which: (local: boolean) => boolean,
  extra: Array<readonly [string, FenceToken]>,
  report = true
): Effect.Effect<void> =>
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
