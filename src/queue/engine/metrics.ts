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
import { QueueFailure } from "../errors.js"

/** What the metrics read from a lane (its `LaneState`): its name and its live counters. */
export interface LaneCounters {
  readonly name: string
  readonly running: number
  readonly waiting: number
}

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

/**
 * The metric series of one lane. Every series is registered once (`Metric.registerUnsafe`) with a
 * `get` that reads plain counters kept here, so a task's start and end cost a few additions and
 * no registry lookup.
 */
export class LaneMetrics {
  private readonly registrations: Array<Metric.Registration> = []
  private readonly outcomes = new Map<Outcome, { count: number }>()
  private successes: { count: number } | undefined = undefined
  // the wait-time histogram, kept as Effect's own histogram keeps it
  private readonly bounds = Float64Array.from(WAIT_BOUNDARIES)
  private readonly values = new Uint32Array(WAIT_BOUNDARIES.length + 1)
  private count = 0
  private sum = 0
  private min = Number.MAX_VALUE
  private max = -Number.MAX_VALUE

  constructor(private readonly lane: LaneCounters, private readonly context: Context.Context<never>) {
    const attributes = { lane: lane.name }
    this.register(
      Metric.gauge("switchyard_queue_running", { description: "Tasks running, per lane", attributes }),
      () => ({ value: lane.running })
    )
    this.register(
      Metric.gauge("switchyard_queue_waiting", { description: "Tasks waiting to start, per lane", attributes }),
      () => ({ value: lane.waiting })
    )
    this.register(
      Metric.histogram("switchyard_queue_wait_ms", {
        description: "Time from admission to start, in milliseconds, per lane",
        attributes,
        boundaries: WAIT_BOUNDARIES
      }),
      (): Metric.HistogramState => {
        const buckets: Array<[number, number]> = []
        let cumulated = 0
        for (let i = 0; i < this.bounds.length; i++) {
          cumulated += this.values[i]!
          buckets.push([this.bounds[i]!, cumulated])
        }
        return { buckets, count: this.count, min: this.min, max: this.max, sum: this.sum }
      }
    )
  }

  private register<S>(metric: Metric.Metric<any, S>, get: () => S): void {
    this.registrations.push(Metric.registerUnsafe(metric, this.context, { get, update: noop, modify: noop }))
  }

  /** A task started after waiting `ms`. */
  waited(ms: number): void {
    const bounds = this.bounds
    let i = 0
    while (i < bounds.length && ms > bounds[i]!) i++
    this.values[i]!++
    this.count++
    this.sum += ms
    if (ms < this.min) this.min = ms
    if (ms > this.max) this.max = ms
  }

  /** A task ended with `exit`: counts it by outcome, and returns the outcome. */
  ended(exit: Exit.Exit<unknown, unknown>): Outcome {
    // the common case without a lookup
    if (Exit.isSuccess(exit) && this.successes !== undefined) {
      this.successes.count++
      return "success"
    }
    const outcome = outcomeOf(exit)
    let counter = this.outcomes.get(outcome)
    if (counter === undefined) {
      const c = { count: 0 }
      counter = c
      this.outcomes.set(outcome, c)
      this.register(
        Metric.counter("switchyard_queue_tasks", {
          description: "Tasks ended, per lane and outcome",
          attributes: { lane: this.lane.name, outcome },
          incremental: true
        }),
        () => ({ count: c.count, incremental: true })
      )
    }
    if (outcome === "success") this.successes = counter
    counter.count++
    return outcome
  }

  unregister(): void {
    for (const r of this.registrations) r.remove()
  }
}
