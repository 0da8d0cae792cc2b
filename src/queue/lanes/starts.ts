/**
 * The lanes' start list: keys given a slot whose activation fiber is not forked yet, and when the
 * list runs. Internal to `src/queue` (below `scheduler.ts`, which forks the fibers).
 *
 * A slot is given synchronously (in `wake`, or where a slot is freed), but its activation is forked
 * from this list, after the caller's synchronous code: so `wake` never runs an activation, and an
 * activation that ends synchronously hands its slot on by appending here, never by recursing.
 */
import { Fifo } from "../fifo.js"
import type { Entry } from "./entry.js"
import { START_BUDGET, START_BUDGET_MS } from "./entry.js"

const RESOLVED: Promise<void> = Promise.resolve()
// Node's global `performance` is a lazy getter, run on every read: read it once.
const perf = performance

/** The keys waiting for their activation fiber, oldest first, and the run that forks them. */
export class StartList<K> {
  /** The STARTING entries (linked through their `prev`/`next`). */
  readonly list = new Fifo<Entry<K>>()
  /** A run is scheduled (a microtask or a `setImmediate`). */
  scheduled = false
  /** The list is running now (`run` is on the stack). */
  running = false
  /** The caller runs the list itself right after (`endInlineEntry`): `add` schedules nothing. */
  startingNow = false
  /** Forks since the last macrotask (see `START_BUDGET`). */
  sinceMacrotask = 0

  /** `forkNow(e)` forks the activation of the head `e` and takes it off the list. */
  constructor(private readonly forkNow: (e: Entry<K>) => void) {}

  /** Appends `e` (STARTING) and makes sure a run will fork it. */
  add(e: Entry<K>): void {
    this.list.push(e)
    if (!this.scheduled && !this.startingNow) this.schedule()
  }

  /** Schedules a run: in a microtask, or after a macrotask once the budget is spent. */
  private schedule(): void {
    this.scheduled = true
    // a reaction on a settled promise: a microtask without `queueMicrotask`'s AsyncResource and bound function
    if (this.sinceMacrotask < START_BUDGET) void RESOLVED.then(this.runInMicrotask)
    else setImmediate(this.runAfterMacrotask)
  }

  /** Whether the caller may run the list now, in its own stack, within the budget. */
  get mayRunNow(): boolean {
    return !this.running && !this.scheduled && this.sinceMacrotask < START_BUDGET
  }

  /**
   * Forks the head of the list now, in the caller's stack (`mayRunNow` said so): what `run` would
   * do first, without reading the clock (a run's first fork goes whatever the time; only the
   * forks after it are timed). The rest of the list, if any, is left to a scheduled run.
   */
  runFirst(): void {
    this.running = true
    try {
      this.sinceMacrotask++
      this.forkNow(this.list.head!)
    } finally {
      this.running = false
    }
    if (this.list.head !== undefined && !this.scheduled) this.schedule()
  }

  /**
   * Forks the activations waiting in the list, oldest first, in one loop. After `START_BUDGET`
   * forks since the last macrotask, or `START_BUDGET_MS` of forks in this run, the rest waits for
   * a `setImmediate` (a long synchronous activation holds the event loop only about that long).
   */
  run(): void {
    this.scheduled = false
    const runStartedAt = perf.now()
    let first = true
    this.running = true
    try {
      const list = this.list
      while (list.head !== undefined) {
        if (this.sinceMacrotask >= START_BUDGET || (!first && perf.now() - runStartedAt >= START_BUDGET_MS)) {
          this.scheduled = true
          setImmediate(this.runAfterMacrotask)
          return
        }
        first = false
        this.sinceMacrotask++
        this.forkNow(list.head)
      }
    } finally {
      this.running = false
    }
  }

  /** `run` as a promise reaction: a throw (a bug) is reported as uncaught, as `queueMicrotask` would. */
  private readonly runInMicrotask = (): void => {
    try {
      this.run()
    } catch (defect) {
      queueMicrotask(() => {
        throw defect
      })
    }
  }

  private readonly runAfterMacrotask = (): void => {
    this.sinceMacrotask = 0
    this.run()
  }
}
