/**
 * The handlers of the ingress' `lanes` group (IngressApi.ts): `GET /lanes`, `POST /lanes/:lane/pause`,
 * `POST /lanes/:lane/resume`, `PUT /lanes/:lane/limits`. Each acts on this runner's local lanes only
 * (LocalLanes.ts); an unknown lane or a limit the queue refuses is a 400 `RequestInvalid`.
 */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import type { RequestError } from "../queue/errors.js"
import type { ClusterQueue } from "./ClusterQueue.js"
import * as IngressApi from "./IngressApi.js"

const invalid = (e: RequestError) => new IngressApi.RequestInvalid({ error: e.message, reason: "invalid" })

/** The lane as this runner has it now (a lane the control just accepted exists). */
const laneNow = (queue: ClusterQueue, lane: string) =>
  Effect.map(queue.snapshot, (lanes) => lanes.find((l) => l.lane === lane)!)

/** The `lanes` group of `api`, served by `queue`. */
export const routes = (api: ReturnType<typeof IngressApi.make>, queue: ClusterQueue) =>
  HttpApiBuilder.group(api, "lanes", (handlers) =>
    Effect.succeed(handlers.handleAll({
      lanes: () => Effect.map(queue.snapshot, (lanes) => ({ runner: queue.member, lanes })),
      pause: ({ params }) =>
        Effect.mapError(
          Effect.as(queue.pause(params.lane), { lane: params.lane, runner: queue.member, paused: true }),
          invalid
        ),
      resume: ({ params }) =>
        Effect.mapError(
          Effect.as(queue.resume(params.lane), { lane: params.lane, runner: queue.member, paused: false }),
          invalid
        ),
      limits: ({ params, payload }) =>
        Effect.gen(function*() {
          yield* Effect.mapError(queue.setLimits(params.lane, payload), invalid)
          const lane = yield* laneNow(queue, params.lane)
          return { lane: lane.lane, runner: queue.member, concurrent: lane.concurrent, queued: lane.queued }
        })
    })))
