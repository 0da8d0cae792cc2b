/**
 * Watching the delivery log's health (`DeliveryLog.health`, delivery.md "Health"): the agent shows
 * it in `snapshot.log`, reports each change as a `log-health` event, and when the log is healthy
 * again retries the turns that failed on it, without a restart.
 */
import { Effect } from "effect"
import type { DeliveryLog, DeliveryLogHealth } from "../delivery/index.js"
import type { AgentEvent } from "./events.js"

/** The delivery log's health as the agent reports it. */
export type LogHealthStatus =
  | { readonly status: "ok" }
  | { readonly status: "failing"; readonly since: number; readonly error: string }

/** How often the agent looks at the log's health. */
export const HEALTH_POLL_MS = 1_000

const OK: LogHealthStatus = { status: "ok" }

const toStatus = (h: DeliveryLogHealth): LogHealthStatus =>
  h.status === "ok" ? OK : { status: "failing", since: h.since, error: h.error.message }

/**
 * `status` reads the health now; `watch` polls it every `HEALTH_POLL_MS` on the Effect `Clock`,
 * emits `log-health` on a change, and runs `healed` when it turns ok again.
 */
export const watchLogHealth = (
  log: DeliveryLog.DeliveryLog,
  options: { readonly emit: (event: AgentEvent) => void; readonly healed: Effect.Effect<void> }
): { readonly status: Effect.Effect<LogHealthStatus>; readonly watch: Effect.Effect<never> } => {
  const status = Effect.map(log.health, toStatus)
  const watch = Effect.gen(function*() {
    let last: LogHealthStatus["status"] = "ok"
    while (true) {
      yield* Effect.sleep(HEALTH_POLL_MS)
      const now = yield* status
      if (now.status === last) continue
      last = now.status
      options.emit(now.status === "ok" ? { type: "log-health", status: "ok" } : { type: "log-health", status: "failing", error: now.error })
      if (now.status === "ok") yield* options.healed
    }
  })
  return { status, watch }
}
