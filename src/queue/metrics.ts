/**
 * The queue's metrics, through Effect's `Metric` (one series per lane):
 * - `switchyard_queue_running` / `switchyard_queue_waiting` (gauges, read from the lane's counters
 *   when a snapshot is taken, so the hot path pays nothing for them);
 * - `switchyard_queue_tasks` (counter, by `outcome`: success, failure, defect, interrupted,
 *   canceled, timeout, closed, stale);
 * - `switchyard_queue_wait_ms` (histogram of the time from admission to start).
 */
import { Cause, Exit, Metric } from "effect"
import type { Context } from "effect"
import { QueueFailure } from "./errors.js"
import type { LaneState } from "./lane.js"

/** How a task ended, as the tasks counter labels it. */
export type Outcome = "success" | "failure" | "defect" | "interrupted" | "canceled" | "timeout" | "closed" | "stale"

/** The outcome label of an exit. */
export const outcomeOf = (exit: Exit.Exit<unknown, unknown>): Outcome => {
  if (Exit.isSuccess(exit)) return "success"
  for (const r of exit.cause.reasons) {
    if (Cause.isFailReason(r) && r.error instanceof QueueFailure) return r.error.reason
  }
  if (Cause.hasFails(exit.cause)) return "failure"
  if (Cause.hasDies(exit.cause)) return "defect"
  return "interrupted"
}

const noop = () => {}
const WAIT_BOUNDARIES = Metric.exponentialBoundaries({ start: 1, factor: 2, count: 20 })

/** The metric series of one lane. */
export class LaneMetrics {
  private readonly registrations: Array<Metric.Registration>
  private readonly counters = new Map<Outcome, Metric.Counter<number>>()
  private readonly wait: Metric.Histogram<number>

  constructor(private readonly lane: LaneState, private readonly context: Context.Context<never>) {
    const attributes = { lane: lane.name }
    this.registrations = [
      Metric.registerUnsafe(
        Metric.gauge("switchyard_queue_running", { description: "Tasks running, per lane", attributes }),
        context,
        { get: () => ({ value: lane.running }), update: noop, modify: noop }
      ),
      Metric.registerUnsafe(
        Metric.gauge("switchyard_queue_waiting", { description: "Tasks waiting to start, per lane", attributes }),
        context,
        { get: () => ({ value: lane.waiting }), update: noop, modify: noop }
      )
    ]
    this.wait = Metric.histogram("switchyard_queue_wait_ms", {
      description: "Time from admission to start, in milliseconds, per lane",
      attributes,
      boundaries: WAIT_BOUNDARIES
    })
  }

  waited(ms: number): void {
    this.wait.updateUnsafe(ms, this.context)
  }

  ended(exit: Exit.Exit<unknown, unknown>): Outcome {
    const outcome = outcomeOf(exit)
    let counter = this.counters.get(outcome)
    if (counter === undefined) {
      counter = Metric.counter("switchyard_queue_tasks", {
        description: "Tasks ended, per lane and outcome",
        attributes: { lane: this.lane.name, outcome }
      })
      this.counters.set(outcome, counter)
    }
    counter.updateUnsafe(1, this.context)
    return outcome
  }

  unregister(): void {
    for (const r of this.registrations) r.remove()
  }
}
