/**
 * One heartbeat per cluster: an effect/cluster singleton (it runs on exactly one runner at a time and
 * moves when that runner leaves or dies) that dispatches a turn on lane `heartbeat`, session
 * `heartbeat`, every `everyMs`. The dispatch coalesces across processes, so a heartbeat due while the
 * previous one still waits adds nothing.
 */
import type { Layer } from "effect"
import { Effect } from "effect"
import { Singleton } from "effect/cluster"
import type { Sharding } from "effect/cluster"
import { HEARTBEAT_SESSION, heartbeatPrompt, runHeartbeat } from "../agent/Heartbeat.js"
import type { HeartbeatOptions } from "../agent/Heartbeat.js"
import type { ClusterQueue } from "./ClusterQueue.js"

/** The singleton's name in effect/cluster (`cluster_messages` / the singleton's shard). */
export const SINGLETON = "switchyard-heartbeat"

/** Registers the cluster's heartbeat for the layer's lifetime (every runner registers it; one runs it). */
export const layer = (options: HeartbeatOptions, queue: ClusterQueue): Layer.Layer<never, never, Sharding.Sharding> =>
  Singleton.make(
    SINGLETON,
    Effect.andThen(
      Effect.logInfo(`heartbeat: the cluster's heartbeat runs on ${queue.member} (every ${options.everyMs} ms)`),
      runHeartbeat(
        options.everyMs,
        queue.dispatch("heartbeat", HEARTBEAT_SESSION, { type: "heartbeat", prompt: heartbeatPrompt(options) }, {
          coalesce: true
        }).pipe(
          Effect.asVoid,
          Effect.catch((e) => Effect.logWarning(`Heartbeat not dispatched: ${e.message}`))
        )
      )
    ).pipe(Effect.onInterrupt(() => Effect.logInfo(`heartbeat: the cluster's heartbeat stops on ${queue.member}`)))
  )
