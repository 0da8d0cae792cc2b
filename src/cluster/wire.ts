/** The cluster queue's rules at its edges: what a dispatch may carry, and how a run's reply becomes a future's outcome. */
import { Exit } from "effect"
import type { LaneLimits } from "../queue/CommandQueue.js"
import { QueueFailure, RequestError } from "../queue/errors.js"
import { notJson } from "./json.js"
import type { WireQueueFailure, WireTaskDefect, WireTaskFailed } from "./protocol.js"

/** The default lanes, as `CommandQueue.make` has them. */
export const DEFAULT_LANES: Record<string, LaneLimits> = {
  main: { concurrent: 4, queued: 64, participation: "blocking", warnAfterMs: 2_000 },
  heartbeat: { concurrent: 1, queued: 8, participation: "background" },
  cron: { concurrent: 2, queued: 32, participation: "background" }
}

/** Options a dispatch may carry (see `ClusterDispatchOptions`). */
interface DispatchOptions {
  readonly coalesce?: boolean
  readonly queueTimeoutMs?: number
  readonly turnTimeoutMs?: number
  readonly runId?: string
}

/** Why a dispatch is refused before anything is sent, or `undefined`. */
export const checkDispatch = (
  lanes: Readonly<Record<string, unknown>>,
  lane: string,
  key: string,
  command: unknown,
  o: DispatchOptions | undefined
): RequestError | undefined => {
  const bad = (message: string) => new RequestError({ lane, key, message })
  if (!(lane in lanes)) {
    return bad(
      `Expected \`lane\` to be one of ${Object.keys(lanes).map((l) => `\`${l}\``).join(", ")}, got \`${lane}\``
    )
  }
  if (typeof key !== "string" || key.length === 0) {
    return bad("Expected `key` to be a non-empty string, got `" + String(key) + "`")
  }
  const notJsonReason = notJson(command, "command")
  if (notJsonReason !== undefined) return bad(`Expected \`command\` to be a JSON value: ${notJsonReason}`)
  for (const field of ["queueTimeoutMs", "turnTimeoutMs"] as const) {
    const v = o?.[field]
    if (v !== undefined && !(Number.isFinite(v) && v > 0)) {
      return bad(`Expected \`${field}\` to be a finite number above 0, got \`${v}\``)
    }
  }
  if (o?.coalesce === true && o.runId !== undefined) {
    return bad(
      "Expected either `coalesce` or `runId`, got both (a coalescing dispatch takes the run id of the run it joins)"
    )
  }
  if (o?.runId !== undefined && (typeof o.runId !== "string" || o.runId.length === 0 || o.runId.length > 200)) {
    return bad(`Expected \`runId\` to be a string of 1 to 200 characters, got \`${String(o.runId)}\``)
  }
  return undefined
}

/** A run's reply as the future's outcome: `QueueFailure` rebuilt with the dispatcher's run id, a defect as an `Error`. */
export const fromReply = (
  lane: string,
  key: string,
  runId: string,
  exit: Exit.Exit<unknown, unknown>
): {
  readonly kind: "succeeded" | "failed" | "queueFailures" | "defects"
  readonly exit: Exit.Exit<unknown, unknown>
} => {
  if (Exit.isSuccess(exit)) return { kind: "succeeded", exit }
  const failure = exit.cause.reasons.find((r) => r._tag === "Fail")
  if (failure !== undefined && failure._tag === "Fail") {
    const e = failure.error as WireQueueFailure | WireTaskFailed | WireTaskDefect
    if (e._tag === "QueueFailure") {
      return { kind: "queueFailures", exit: Exit.fail(new QueueFailure({ ...e, runId, lane, key })) }
    }
    if (e._tag === "TaskDefect") {
      const error = new Error(e.message)
      error.name = e.name
      return { kind: "defects", exit: Exit.die(error) }
    }
    return { kind: "failed", exit: Exit.fail(e.error) }
  }
  return { kind: "defects", exit }
}

/** Errors of the cluster transport while the message is durable: trying (or waiting) again is right. */
export const transient = (e: unknown): boolean => {
  const tag = (e as { _tag?: string })?._tag
  return tag === "MailboxFull" || tag === "PersistenceError" || tag === "EntityNotAssignedToRunner" ||
    tag === "AlreadyProcessingMessage" || tag === "RunnerUnavailable"
}
