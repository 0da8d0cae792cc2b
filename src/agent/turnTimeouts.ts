/** The turn timeout of the agent's own lanes (a module of its own: the chatbot's command line reads it before the agent loads). */
import type { CommandQueue } from "../queue/index.js"

/**
 * The `turnTimeoutMs` of the agent's own lanes (`main`, `heartbeat`, `cron`) when neither
 * `AgentOptions.turnTimeoutMs` nor `lanes` sets one: a turn that makes no progress for 5 minutes is
 * interrupted, its model request aborted, and its messages kept and tried again later, as after a
 * retryable model error. A streaming model call renews it per event (`CommandQueue.keepAlive`), so
 * a long answer still arriving is not cut; a reply stream that stalls after its headers is (the
 * SDK's own timeout ends at the headers, so without this it would hold its session until a restart).
 */
export const DEFAULT_TURN_TIMEOUT_MS = 300_000

/** The lanes whose turns the agent runs. */
const AGENT_LANES = ["main", "heartbeat", "cron"] as const

/** `lanes` with `turnTimeoutMs` filled in for each of the agent's own lanes that does not set one. */
export const withTurnTimeouts = (
  lanes: Record<string, CommandQueue.LaneLimits> | undefined,
  turnTimeoutMs: number
): Record<string, CommandQueue.LaneLimits> => {
  const out: Record<string, CommandQueue.LaneLimits> = { ...lanes }
  for (const name of AGENT_LANES) {
    const given = lanes?.[name]
    // merged over the queue's defaults field by field, so a lane given only this keeps its limits
    if (given?.turnTimeoutMs === undefined) out[name] = { ...given, turnTimeoutMs } as CommandQueue.LaneLimits
  }
  return out
}
