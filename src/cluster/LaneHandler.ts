/**
 * What a lane handler of the cluster queue is (the run it gets, {@link ClusterTask}) and the marks a
 * handler carries to tell the key entity (KeyRun.ts) which writes it makes itself: the coalescing
 * slot's start ({@link marksSlot}) and the answer of a volatile run ({@link writesAnswer}).
 */
import type { Effect } from "effect"
import type { Prefetched } from "./Coalesce.js"
import type { FenceToken } from "./Fencing.js"
import type { ReplyCommit } from "./Storage.js"

/** What a lane handler gets: the command as sent (a JSON value) and where it runs. */
export interface ClusterTask {
  readonly runId: string
  readonly lane: string
  readonly key: string
  /** The lane's cluster generation at admission. */
  readonly generation: number
  readonly command: unknown
  /** Epoch ms when the cluster accepted it. */
  readonly admittedAt: number
  /**
   * The key's shard and the fencing epoch this runner holds it at, taken when the run starts here
   * (absent when the runtime has no `Fence`). Writes that make the run's effect visible check it
   * (see Fencing.ts); a handler that finds it stale fails with `_tag: "Fenced"`: the run gets no reply
   * here and the shard's new owner runs it.
   */
  readonly fence?: FenceToken
  /**
   * The run's coalescing slot (Coalesce.ts), for a run dispatched with `coalesce` to a handler made with
   * {@link marksSlot}: the handler marks it started as the first thing it writes. Absent otherwise (the
   * runner marks it before the handler runs).
   */
  readonly coalesceSlot?: number
  /**
   * Present when the runner's storage can commit a handler's writes together with the run's reply
   * (Storage.ts): a handler that calls it with its writes (one statement, see `Storage.replyWrites`)
   * instead of running them itself gets one transaction less per run, and its writes become visible
   * exactly when the run is answered. Call it at most once, just before succeeding; a handler that
   * then fails has its writes dropped.
   */
  readonly commitWithReply?: (commit: ReplyCommit) => void
  /**
   * The run's messages and the session's history, when the dispatch's slot statement started the run (an
   * idle session: Coalesce.ts `Slot.started`) and this is its first send; a handler that reads them itself
   * may use these instead (its run's slot is started already, and nothing else is recorded for the run).
   */
  readonly prefetched?: Prefetched
}

/** Runs one command of a lane. Success and failure values cross processes as JSON. */
export type LaneHandler = (task: ClusterTask) => Effect.Effect<unknown, unknown>

const MarksSlot = Symbol.for("switchyard/cluster/KeyRunner/MarksSlot")

/**
 * A lane handler that marks its run's coalescing slot started itself (`task.coalesceSlot`), in its first
 * statement, before it reads what was recorded for the run (the agent's turn does it together with that
 * read: one statement less per run). If it fails, the runner marks the slot as well.
 */
export const marksSlot = (handler: LaneHandler): LaneHandler =>
  Object.assign((task: ClusterTask) => handler(task), { [MarksSlot]: true })

/** True for a handler made with {@link marksSlot}. */
export const handlerMarksSlot = (handler: LaneHandler): boolean =>
  (handler as { [MarksSlot]?: boolean })[MarksSlot] === true

const WritesAnswer = Symbol.for("switchyard/cluster/KeyRunner/WritesAnswer")

/**
 * A lane handler whose commit also writes its run's answer into the run's inbox rows (Answers.ts), and
 * that fails with `AlreadyAnswered` when its run's start finds one stored: a volatile run (`RunNow`) of it
 * costs no statement of the runner's for its answer when it succeeds.
 */
export const writesAnswer = (handler: LaneHandler): LaneHandler =>
  Object.assign((task: ClusterTask) => handler(task), {
    [WritesAnswer]: true,
    [MarksSlot]: handlerMarksSlot(handler)
  })

/** True for a handler made with {@link writesAnswer}. */
export const handlerWritesAnswer = (handler: LaneHandler): boolean =>
  (handler as { [WritesAnswer]?: boolean })[WritesAnswer] === true
