/**
 * An async fast-check property that stays inside its test, on a loaded 2-core CI machine too:
 *
 * - a time budget (`budgetMs`, below the test's timeout): no run starts after it, and the property passes
 *   with the runs it made when they are at least `minRuns` (fails otherwise, naming the seed);
 * - the seed is chosen here and printed with every failure, and when the test runner stops the test
 *   (its timeout): `FC_SEED=<seed>` replays the same runs;
 * - nothing runs on after it returns or after the test timed out: the predicate gets an `AbortSignal`,
 *   aborted then, and must stop at its next step (throw `signal.reason`, close what it opened); the
 *   helper waits for the run in flight to end before it returns. With vitest's `isolate: false` the next
 *   test file runs in the same process, so a run left behind would write files and use `fs` during it.
 */
import fc from "fast-check"

export interface BoundedOptions {
  /** Runs wanted. */
  readonly numRuns: number
  /** When the budget ran out first, at least this many runs must have been made. */
  readonly minRuns: number
  /** No run starts after this many milliseconds; keep it well below the test's timeout. */
  readonly budgetMs: number
  /** The test's signal (vitest's `({ signal })`), aborted when the test times out. */
  readonly signal: AbortSignal
}

/** `FC_SEED` when set (to replay), otherwise a fresh one. */
export const propertySeed = (): number => {
  const fixed = process.env.FC_SEED
  return fixed !== undefined && fixed !== "" ? Number(fixed) : (Math.random() * 0x7fffffff) | 0
}

/** Checks `predicate` over `arbitrary` (see the module's comment); throws fast-check's report on a failure. */
export const checkBounded = async <T>(
  arbitrary: fc.Arbitrary<T>,
  predicate: (value: T, signal: AbortSignal) => Promise<void>,
  options: BoundedOptions
): Promise<void> => {
  const seed = propertySeed()
  const stop = new AbortController()
  const timedOut = () => {
    console.error(`property stopped by the test runner (timeout?) at seed ${seed}: re-run with FC_SEED=${seed}`)
    stop.abort(new Error(`stopped by the test runner, seed ${seed}`))
  }
  if (options.signal.aborted) timedOut()
  else options.signal.addEventListener("abort", timedOut, { once: true })
  let inFlight: Promise<unknown> = Promise.resolve()
  try {
    const details = await fc.check(
      fc.asyncProperty(arbitrary, (value) => {
        // Once stopped, the runs fast-check still asks for (shrinking) are skipped, not run.
        fc.pre(!stop.signal.aborted)
        const run = predicate(value, stop.signal)
        inFlight = run.catch(() => undefined)
        return run
      }),
      { numRuns: options.numRuns, seed, plugins: [fc.interruptAfterTimeLimit(options.budgetMs)] }
    )
    if (details.failed) {
      const report = await fc.asyncDefaultReportMessage(details)
      throw new Error(`${report ?? "property failed"}\nRe-run with FC_SEED=${seed}`, { cause: details.errorInstance })
    }
    if (details.numRuns < Math.min(options.minRuns, options.numRuns)) {
      throw new Error(
        `Expected at least ${options.minRuns} runs within ${options.budgetMs} ms, got ${details.numRuns} ` +
          `(the machine is too slow for this budget, or a run got slower); re-run with FC_SEED=${seed}`
      )
    }
  } finally {
    options.signal.removeEventListener("abort", timedOut)
    stop.abort(new Error(`property over, seed ${seed}`))
    await inFlight
  }
}
