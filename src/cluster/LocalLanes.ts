/**
 * The lane controls that act on one runner: pause, resume and limits of its local `CommandQueue`.
 * A key's runs execute on the runner that holds the key's shard, so these change how that runner
 * runs them; other runners keep their own settings (docs/cluster.md says which controls hold
 * cluster-wide and why these do not).
 */
import { Effect } from "effect"
import type { CommandQueue, LaneLimits } from "../queue/CommandQueue.js"
import type { RequestError } from "../queue/errors.js"

/** `pause`, `resume`, `setLimits` over `local`; `setLimits` also moves this process' dispatch bound (`lanes`). */
export const controls = (local: CommandQueue, lanes: Record<string, Partial<LaneLimits>>) => ({
  pause: (lane: string): Effect.Effect<void, RequestError> => local.pause(lane),
  resume: (lane: string): Effect.Effect<void, RequestError> => local.resume(lane),
  setLimits: (lane: string, limits: Partial<LaneLimits>): Effect.Effect<void, RequestError> =>
    Effect.andThen(
      local.setLimits(lane, limits),
      Effect.sync(() => {
        lanes[lane] = { ...lanes[lane], ...limits }
      })
    )
})
