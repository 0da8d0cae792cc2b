/**
 * The public shapes of the cluster queue (ClusterQueue.ts): its options, the handle of a dispatch, the
 * queue of one process.
 */
import type { Duration, Effect, Exit, Option } from "effect"
import type { DrainReport, LaneLimits, LaneSnapshot, TaskReport } from "../queue/CommandQueue.js"
import type { AdmissionError, FutureTimeout, QueueFailure, RequestError } from "../queue/errors.js"
import type { InboxMessage } from "./Coalesce.js"
import type { LaneHandler } from "./LaneHandler.js"
import type { RunNow } from "./protocol.js"

/** Options of `ClusterQueue.make`. Lane limits apply per runner (each runner's local queue). */
export interface ClusterQueueOptions {
  /** Merged over the default lanes `main`, `heartbeat`, `cron`, as for `CommandQueue.make`. Every runner must use the same lanes. */
  readonly lanes?: Readonly<Record<string, Partial<LaneLimits>>>
  /** The handler of each lane this runner runs. Every runner must register the same ones. */
  readonly handlers: Readonly<Record<string, LaneHandler>>
  /** This runner's name in membership and reports; default a random id. */
  readonly member?: string
  /** Table prefix of switchyard's tables (created when missing, see `Migrations`); default `switchyard`. */
  readonly prefix?: string
  readonly drainTimeoutMs?: number
  readonly auditTimeoutMs?: number
  /** Called on the runner that ran the task, once per task (see `CommandQueue`). */
  readonly onTaskExit?: (report: TaskReport) => Effect.Effect<void> | void
  /** How long `restartLane` waits for the other runners to apply the new generation; default 30_000. */
  readonly restartTimeoutMs?: number
  /**
   * Dispatches with an `inbox` message are volatile runs (Replay.ts) when the runtime fences its shards:
   * while one waits this long for its answer, it is sent again; default 2_000 ms.
   */
  readonly resendMs?: number
  /** The sweep of unanswered volatile runs (Replay.ts): its period and the age of the runs it sends. */
  readonly sweepMs?: number
  readonly sweepAgeMs?: number
  /**
   * A shorter way to the owner of a volatile run's shard than effect/cluster's runners' socket (the runner
   * passes its ingress's, Hop.ts): the first send of the run goes this way when it names another runner and
   * that answers; otherwise (`undefined`) the run is sent the usual way at once.
   */
  readonly forward?: (
    shard: string,
    payload: RunNowPayload
  ) => Effect.Effect<Exit.Exit<unknown, unknown> | undefined>
  /**
   * A volatile run whose shard this runner holds goes straight into its local lane, without effect/cluster's
   * send (KeyRunner.ts `local`; docs/cluster.md "The local way"); default true. False: through its key's
   * entity, as every other run.
   */
  readonly localRuns?: boolean
}

/** The payload of a volatile run (protocol.ts `RunNow`). */
export type RunNowPayload = typeof RunNow.payloadSchema.Type

/**
 * The handle of a dispatched command. `admission` is `"queued"` (accepted into the key's durable
 * mailbox) or `"coalesced"` (joined a run of the key that waits and has not started; `runId` is its id).
 */
export interface ClusterFuture<A, E> {
  /** Unique in the cluster; re-sending a dispatch with the same `runId` joins this run. */
  readonly runId: string
  readonly lane: string
  readonly key: string
  /** The lane's cluster generation at admission. */
  readonly generation: number
  readonly admission: "queued" | "coalesced"
  readonly await: Effect.Effect<A, E | QueueFailure>
  readonly poll: Effect.Effect<Option.Option<Exit.Exit<A, E | QueueFailure>>>
  readonly awaitTimeout: (timeout: Duration.Input) => Effect.Effect<A, E | QueueFailure | FutureTimeout>
  /** Drops the run if it waits, interrupts it if it runs, wherever it is; returns once its outcome is known. */
  readonly cancel: Effect.Effect<void>
}

/** Options of one cluster dispatch. */
export interface ClusterDispatchOptions {
  /** Join the key's run that waits and has not started (across processes), instead of adding one. */
  readonly coalesce?: boolean
  readonly queueTimeoutMs?: number
  readonly turnTimeoutMs?: number
  /** The run's id; a client's message id makes a retried dispatch join the first one. Default a random UUID. */
  readonly runId?: string
  /**
   * Runs once the run id is known, before the run is sent; with `coalesce`, inside the slot's lock (in
   * the slot's transaction), so the run has not started yet.
   */
  readonly beforeSend?: (runId: string) => Effect.Effect<void, unknown>
  /**
   * With `coalesce`: records this message in the inbox (Inbox.ts) for the run the dispatch joins or opens,
   * in the same statement as the slot; a `messageId` recorded before joins the run it was recorded for.
   */
  readonly inbox?: InboxMessage
}

/** Options of {@link ClusterQueue.drain}. */
export interface DrainOptions {
  readonly timeoutMs?: number
  /** At the deadline, fail the futures `closed` without canceling their runs. Default false. */
  readonly keepRuns?: boolean
}

/** The cluster queue of one process (a runner). */
export interface ClusterQueue {
  readonly member: string
  readonly dispatch: <A = unknown, E = unknown>(
    lane: string,
    key: string,
    command: unknown,
    options?: ClusterDispatchOptions
  ) => Effect.Effect<ClusterFuture<A, E>, AdmissionError | RequestError>
  /** Makes every run of `lane` stale in the whole cluster; returns once every live runner applied it (or `restartTimeoutMs`). */
  readonly restartLane: (lane: string) => Effect.Effect<number, RequestError>
  readonly restartAll: Effect.Effect<void>
  readonly generation: (lane: string) => Effect.Effect<number, RequestError>
  /**
   * Cancels every run of the key dispatched before the call: those its runner holds (returns once they
   * ended) and those that reach it later (they fail `canceled` when they arrive).
   */
  readonly cancel: (lane: string, key: string) => Effect.Effect<void, RequestError>
  /**
   * Closes this process' admission, waits for the futures it dispatched (up to `timeoutMs`, default
   * `drainTimeoutMs`), then fails the rest `closed` and cancels their runs where they run; with
   * `keepRuns: true` it only stops waiting: the runs stay durable in the cluster and are answered there.
   * The same deadline bounds the local lanes' drain when the Scope closes.
   */
  readonly drain: (options?: DrainOptions) => Effect.Effect<DrainReport>
  /** This runner's lanes (running and waiting here), with the cluster generation. */
  readonly snapshot: Effect.Effect<ReadonlyArray<LaneSnapshot>>
  /**
   * Pauses the lane **on this runner only** (`CommandQueue.pause` of its local queue): runs of the
   * keys whose shards live here wait; other runners go on. Not kept across a restart of the runner.
   */
  readonly pause: (lane: string) => Effect.Effect<void, RequestError>
  /** Resumes the lane on this runner (`CommandQueue.resume`). */
  readonly resume: (lane: string) => Effect.Effect<void, RequestError>
  /**
   * Changes the lane's limits **on this runner only** (`CommandQueue.setLimits` of its local queue,
   * and the bound of this process' own dispatches). Not kept across a restart of the runner.
   */
  readonly setLimits: (lane: string, limits: Partial<LaneLimits>) => Effect.Effect<void, RequestError>
  /** Live members of the cluster and the generations they applied. */
  readonly members: Effect.Effect<
    ReadonlyArray<{ readonly member: string; readonly seenAgoMs: number; readonly applied: Record<string, number> }>
  >
  /**
   * Runs a volatile run another runner's ingress sent here (Hop.ts): the local way when this runner holds
   * its shard, else a send to its key's entity from here. Its answer, or the transport's failure.
   */
  readonly runNow: (payload: RunNowPayload) => Effect.Effect<Exit.Exit<unknown, unknown>>
  /** Counters of this process: dispatched, settled by outcome, outstanding futures. */
  readonly counters: Effect.Effect<Readonly<Record<string, number>>>
}
