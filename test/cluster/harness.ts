/** One cluster queue on one in-process runner, with a lane handler the tests steer through JSON commands. */
import { Deferred, Effect } from "effect"
import * as ClusterQueue from "../../src/cluster/ClusterQueue.js"
import type { ClusterTask } from "../../src/cluster/ClusterQueue.js"
import { runnerContext } from "./support.js"

/** Gates the handlers wait on, by name (commands are JSON, so they name them). */
const gates = new Map<string, Deferred.Deferred<void>>()
export const gate = (name: string) => {
  let g = gates.get(name)
  if (g === undefined) {
    g = Deferred.makeUnsafe<void>()
    gates.set(name, g)
  }
  return g
}
export const events: Array<string> = []

export type Command =
  | { readonly op: "echo"; readonly value: unknown }
  | { readonly op: "fail"; readonly error: unknown }
  | { readonly op: "die" }
  | { readonly op: "block"; readonly gate: string; readonly started?: string; readonly value?: unknown }

export const handler = (task: ClusterTask) =>
  Effect.gen(function*() {
    const c = task.command as Command
    events.push(`start:${task.key}:${task.runId}`)
    switch (c.op) {
      case "echo":
        return c.value
      case "fail":
        return yield* Effect.fail(c.error)
      case "die":
        return yield* Effect.die(new Error("boom"))
      case "block":
        if (c.started) yield* Deferred.succeed(gate(c.started), undefined)
        yield* Deferred.await(gate(c.gate)).pipe(
          Effect.onInterrupt(() => Effect.sync(() => events.push(`interrupted:${task.runId}`)))
        )
        return c.value ?? "unblocked"
    }
  }).pipe(Effect.ensuring(Effect.sync(() => events.push(`end:${task.key}:${task.runId}`))))

/** Runs `f` with a cluster queue on a runner of this process (lanes: main 2 + 8, drain 2 s). */
export const withClusterQueue = <A, E>(
  url: string,
  port: number,
  f: (q: ClusterQueue.ClusterQueue) => Effect.Effect<A, E>
) =>
  Effect.scoped(Effect.gen(function*() {
    const ctx = yield* runnerContext(url, port)
    const q = yield* ClusterQueue.make({
      handlers: { main: handler, cron: handler, heartbeat: handler },
      lanes: { main: { concurrent: 2, queued: 8 } },
      member: "test-runner",
      drainTimeoutMs: 2_000
    }).pipe(Effect.provideContext(ctx))
    return yield* f(q)
  }))
