/**
 * Watching and clearing without draining: `waitForIdle` (admission stays open) and `clear` (the
 * waiting tasks of a lane fail `canceled`). Internal to `src/queue` (part of the engine; below it:
 * `control.ts` for stopping and awaiting tasks, `state.ts`).
 */
import { Deferred, Effect, Option } from "effect"
import { RequestError } from "../errors.js"
import { expected } from "../show.js"
import { awaitAll, stopTasks } from "./control.js"
import { checkWaitTimeout } from "./options.js"
import type { EngineState } from "./state.js"
import { unknownLane, WAITING } from "./state.js"

const IDLE: { readonly idle: boolean } = Object.freeze({ idle: true })
const NOT_IDLE: { readonly idle: boolean } = Object.freeze({ idle: false })

/** The options of `waitForIdle`. */
export interface WaitForIdleOptions {
  /** Only this lane; every lane when absent. */
  readonly lane?: string
  /** Give up after this long with `{ idle: false }`; no deadline when absent. */
  readonly timeoutMs?: number
}

/**
 * Waits until the lane (or every lane) holds no task (nothing running, waiting or finishing: every
 * admitted future settled), or until the deadline. Admission stays open. A bad option is a defect
 * (a `RequestError`), as a bad `drain` deadline is.
 */
export function waitForIdle(
  engine: EngineState,
  options: WaitForIdleOptions | undefined
): Effect.Effect<{ readonly idle: boolean }> {
  return Effect.suspend(() => {
    if (options !== undefined && (typeof options !== "object" || options === null)) {
      return Effect.die(new RequestError({ lane: "", key: "", message: expected("options", "an object", options) }))
    }
    const timeoutMs = options?.timeoutMs
    if (timeoutMs !== undefined) {
      const bad = checkWaitTimeout(timeoutMs)
      if (bad !== undefined) return Effect.die(new RequestError({ lane: options?.lane ?? "", key: "", message: bad }))
    }
    let wait: Deferred.Deferred<void>
    const laneName = options?.lane
    if (laneName !== undefined) {
      const lane = engine.byName.get(laneName)
      if (lane === undefined) {
        // with `unknownLane`, a name no lane has is a lane that holds nothing (yet)
        return engine.options.unknownLane !== undefined && typeof laneName === "string" && laneName.length > 0
          ? Effect.succeed(IDLE)
          : Effect.die(unknownLane(engine, laneName, ""))
      }
      if (lane.live === 0) return Effect.succeed(IDLE)
      wait = lane.idle ??= Deferred.makeUnsafe<void>()
    } else {
      if (engine.live === 0) return Effect.succeed(IDLE)
      wait = engine.idle ??= Deferred.makeUnsafe<void>()
    }
    if (timeoutMs === undefined) return Effect.as(Deferred.await(wait), IDLE)
    return Effect.map(
      Effect.timeoutOption(Deferred.await(wait), timeoutMs),
      (done) => (Option.isSome(done) ? IDLE : NOT_IDLE)
    )
  })
}

/**
 * Fails every waiting task of the lane `QueueFailure` `canceled` (stage queued) now, leaves the
 * running ones alone, and returns how many it dropped once they all settled (finalizers included).
 */
export function clear(engine: EngineState, laneName: string): Effect.Effect<number, RequestError> {
  return Effect.suspend(() => {
    const lane = engine.byName.get(laneName)
    if (lane === undefined) return Effect.fail(unknownLane(engine, laneName, ""))
    if (lane.waiting === 0) return Effect.succeed(0)
    const dropped = stopTasks(engine, lane.keys.values(), "canceled", (t) => t.state === WAITING)
    return Effect.as(awaitAll(dropped), dropped.length)
  })
}
