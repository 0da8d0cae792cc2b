/**
 * The wire protocol of the cluster queue: one entity per lane and key (`<lane>/<key>`), whose
 * persisted `Run` messages are the key's queue, and the failures that cross processes.
 */
import { Schema } from "effect"
import { ClusterSchema, Entity } from "effect/cluster"
import { Rpc } from "effect/rpc"

/** A `QueueFailure` as it crosses processes. */
export const WireQueueFailure = Schema.TaggedStruct("QueueFailure", {
  runId: Schema.String,
  lane: Schema.String,
  key: Schema.String,
  participation: Schema.Literals(["blocking", "background"]),
  stage: Schema.Literals(["queued", "running"]),
  reason: Schema.Literals(["canceled", "timeout", "closed", "stale"])
})
export type WireQueueFailure = typeof WireQueueFailure.Type

/** The handler's own failure (a JSON value), as it crosses processes. */
export const WireTaskFailed = Schema.TaggedStruct("TaskFailed", { error: Schema.Unknown })
export type WireTaskFailed = typeof WireTaskFailed.Type

/**
 * A defect of the handler, as it crosses processes. (A defect reply would make effect/cluster restart
 * the entity and replay the run; a defect of the task is an outcome, not a reason to run it again.)
 */
export const WireTaskDefect = Schema.TaggedStruct("TaskDefect", { message: Schema.String, name: Schema.String })
export type WireTaskDefect = typeof WireTaskDefect.Type

/**
 * Runs one command on the key's runner. Persisted: it survives the runner; `runId` dedupes re-sends.
 * Interrupted when its entity stops here (shard handoff, shutdown) instead of holding the handoff up
 * to effect/cluster's termination timeout: effect/cluster then leaves it, unanswered, to the key's
 * next runner, and the key's runner cancels its local task before it lets go of the shard. The
 * dispatcher's wait for the reply can be interrupted without touching the run.
 */
export const Run = Rpc.make("Run", {
  payload: {
    runId: Schema.String,
    lane: Schema.String,
    key: Schema.String,
    generation: Schema.Number,
    command: Schema.Unknown,
    admittedAt: Schema.Number,
    /** Set for a coalescing dispatch: the key's coalescing slot this run is. */
    coalesceSlot: Schema.optional(Schema.Number),
    queueTimeoutMs: Schema.optional(Schema.Number),
    turnTimeoutMs: Schema.optional(Schema.Number)
  },
  success: Schema.Unknown,
  error: Schema.Union([WireQueueFailure, WireTaskFailed, WireTaskDefect]),
  primaryKey: (p) => p.runId
})
  .annotate(ClusterSchema.Persisted, true)
  .annotate(ClusterSchema.InterruptOnTermination, true)
  // A dispatcher that stops waiting (it shuts down) must not cancel the run: canceling is `Cancel`'s job.
  .annotate(ClusterSchema.Uninterruptible, "client")

/**
 * The same run as {@link Run}, as a volatile request: nothing of effect/cluster's is saved. The ingress
 * sends its runs this way because their inbox rows, committed before the message is accepted, are
 * already their durability (Replay.ts): the key's owner runs the unanswered rows of its shards when it
 * acquires them and on a periodic sweep, a dispatcher sends again while it has no answer, and the
 * owner recognises a run it runs or answered by its run id. `replay` says who sends it again:
 * `"dispatcher"` wants the answer; `"owner"` (the acquisition replay, the sweep) only wants the run to
 * happen, so a run that already runs or was answered is answered at once with nothing.
 */
export const RunNow = Rpc.make("RunNow", {
  payload: {
    ...Run.payloadSchema.fields,
    replay: Schema.optional(Schema.Literals(["dispatcher", "owner"])),
    /**
     * Set when the dispatch's slot statement started the run (an idle session, Coalesce.ts): its messages
     * and the session's history then, so the turn reads nothing before the model. A send again (`replay`)
     * does not use it: that turn reads what is stored.
     */
    prefetched: Schema.optional(Schema.Struct({
      texts: Schema.Array(Schema.String),
      history: Schema.Array(Schema.Struct({ role: Schema.Literals(["user", "assistant"]), content: Schema.String })),
      rows: Schema.Number
    })),
    /**
     * The same as `prefetched`, with the history as the slot statement's JSON text, passed through unparsed
     * to the runner that runs the turn (Coalesce.ts `StartedRaw`); what this version sends. A runner of an
     * older version ignores it (an unknown field) and its turn reads what is stored.
     */
    startedRaw: Schema.optional(Schema.Struct({
      texts: Schema.Array(Schema.String),
      history: Schema.String,
      rows: Schema.Number
    }))
  },
  success: Schema.Unknown,
  error: Schema.Union([WireQueueFailure, WireTaskFailed, WireTaskDefect])
})
  // Interrupted when its entity stops here, as `Run` is: without it a shard handoff waited up to
  // effect/cluster's termination timeout (15 s) for every `RunNow` its entity had not answered, a run
  // this runner left (fenced, no epoch: VolatileRuns.ts) included, whose request nothing answers here.
  // Its dispatcher gets the interrupt, no answer, and sends it again; the key's next runner runs it.
  .annotate(ClusterSchema.InterruptOnTermination, true)
  // A dispatcher that stops waiting must not cancel the run (only `Cancel` does).
  .annotate(ClusterSchema.Uninterruptible, "client")

/** Cancels one run: drops it if it waits, interrupts it if it runs; replies once it ended. */
export const Cancel = Rpc.make("Cancel", {
  payload: { runId: Schema.String },
  success: Schema.Void
})

/**
 * Cancels every run of the key on its runner, and every run admitted up to `before` (epoch ms) that
 * reaches the runner later; replies once the runs it holds ended.
 */
export const CancelKey = Rpc.make("CancelKey", {
  payload: { lane: Schema.String, key: Schema.String, before: Schema.Number },
  success: Schema.Void
})

/** The key entity: its id is `<lane>/<key>`. */
export const KeyEntity = Entity.make("switchyard/Key", [Run, RunNow, Cancel, CancelKey])

/** The entity id of a lane and key. */
export const entityId = (lane: string, key: string): string => `${lane}/${key}`
