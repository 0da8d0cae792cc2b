/**
 * Watching the delivery log's health (`DeliveryLog.health`, delivery.md "Health"): the agent shows
 * it in `snapshot.log`, reports each change as a `log-health` event, and when the log is healthy
 * again retries the turns that failed on it, without a restart.
 */
import { Deferred, Effect, Exit } from "effect"
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
 * `status` reads the health now; `watch` polls it every `HEALTH_POLL_MS` on the Effect `Clock`
 * while it matters (after `poke`: a turn failed on the disk or the log, until the log is ok and no
 * such failure is left), emits `log-health` on a change, and runs `healed` when it turns ok again.
 * An idle agent does not poll (a `TestClock` moved by a day wakes nothing).
 */
export const watchLogHealth = (
  log: DeliveryLog.DeliveryLog,
  options: {
    readonly emit: (event: AgentEvent) => void
    readonly healed: Effect.Effect<void>
    /** Whether some turn still waits on the disk or the log. */
    readonly waiting: () => boolean
  }
): {
  readonly status: Effect.Effect<LogHealthStatus>
  readonly watch: Effect.Effect<never>
  /** A turn failed on the disk or the log: start watching. */
  readonly poke: () => void
} => {
  const status = Effect.map(log.health, toStatus)
  let wake = Deferred.makeUnsafe<void>()
  const poke = () => Deferred.doneUnsafe(wake, Exit.void)
  const watch = Effect.gen(function*() {
    let last: LogHealthStatus["status"] = "ok"
    while (true) {
      if (last === "ok" && !options.waiting()) {
        yield* Deferred.await(wake)
        wake = Deferred.makeUnsafe<void>()
      }
      yield* Effect.sleep(HEALTH_POLL_MS)
      const now = yield* status
      if (now.status === last) continue
      last = now.status
      options.emit(
        now.status === "ok"
          ? { type: "log-health", status: "ok" }
          : { type: "log-health", status: "failing", error: now.error }
      )
      if (now.status === "ok") yield* options.healed
    }
  })
  return { status, watch, poke }
}
