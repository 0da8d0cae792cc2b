/**
 * Watching the delivery log's health (`DeliveryLog.health`, delivery.md "Health"): the agent shows
 * it in `snapshot.log`, reports each change as a `log-health` event, and when the log is healthy
 * again retries the turns that failed on it, without a restart. A log that does not report its
 * health (an older store) is always "ok"; then the retries' own backoff is the probe.
 */
import { Effect } from "effect"
import type { DeliveryLog } from "../delivery/index.js"
import type { AgentEvent } from "./events.js"

/** The delivery log's health as the agent reports it. */
export type LogHealthStatus =
  | { readonly status: "ok" }
  | { readonly status: "failing"; readonly since: number; readonly error: string }

/** How often the agent looks at the log's health. */
export const HEALTH_POLL_MS = 1_000

type RawHealth = { readonly status: "ok" } | { readonly status: "failing"; readonly since: number; readonly error: { readonly message: string } }

const OK: LogHealthStatus = { status: "ok" }

/** The log's `health`, when it has one. */
const healthOf = (log: DeliveryLog.DeliveryLog): Effect.Effect<RawHealth> | undefined =>
  (log as { readonly health?: Effect.Effect<RawHealth> }).health

const toStatus = (h: RawHealth): LogHealthStatus =>
  h.status === "ok" ? OK : { status: "failing", since: h.since, error: h.error.message }

/**
 * `status` reads the health now; `watch` (absent for a log without `health`) polls it every
 * `HEALTH_POLL_MS` on the Effect `Clock`, emits `log-health` on a change, and runs `healed` when it
 * turns ok again.
 */
export const watchLogHealth = (
  log: DeliveryLog.DeliveryLog,
  options: { readonly emit: (event: AgentEvent) => void; readonly healed: Effect.Effect<void> }
): { readonly status: Effect.Effect<LogHealthStatus>; readonly watch?: Effect.Effect<never> } => {
  const health = healthOf(log)
  if (health === undefined) return { status: Effect.succeed(OK) }
  const status = Effect.map(health, toStatus)
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
