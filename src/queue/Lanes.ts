/**
 * Lanes: at most one activation per key, at most `maxConcurrent` activations at once, a bounded
 * FIFO of keys waiting for a slot. The contract is `shared/spec/lanes.md`.
 *
 * This file is the public face: `createLanes` and its types (declared in `lanes/types.ts`). Below
 * it, read up: `lanes/types.ts`, `lanes/config.ts` (validation), `lanes/entry.ts` (a key's entry,
 * the internal types), `lanes/keyTable.ts`, `lanes/waiting.ts`, `lanes/starts.ts`,
 * `lanes/activation.ts`, `lanes/scheduler.ts` (the scheduler).
 */
import type { Effect, Scope } from "effect"
import type { LanesConfigInvalid } from "./errors.js"
import { createLanesInternal } from "./lanes/scheduler.js"
import type { Lanes, LanesOptions } from "./lanes/types.js"

export type { ActivationExit, Lanes, LanesOptions, WakeResult } from "./lanes/types.js"

/**
 * Creates keyed lanes in the current Scope (closing it closes the lanes). Guarantees: one
 * activation per key at a time, at most `maxConcurrent` at once, every wake served by an
 * activation that starts after it, the longest waiter served first, an activation's Scope
 * closed and its `onExit` returned before its slot passes on, and no state kept for idle keys.
 */
export const createLanes: <K, E = never, R = never>(
  options: LanesOptions<K, E, R>
) => Effect.Effect<Lanes<K>, LanesConfigInvalid, Scope.Scope | R> = (options) => createLanesInternal(options)
