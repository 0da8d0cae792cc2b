/**
 * A message the cluster could not take (its dispatch failed: Postgres out of reach, say) is a 500 that
 * says why and that it was not accepted, and the runner logs it; it was a bare "dispatch failed" with
 * nothing in the log. No Postgres here: the queue is a stand-in whose dispatch fails as a
 * `PgConnection` that cannot connect does.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Logger } from "effect"
import { ConnectionError, SqlError } from "effect/sql/SqlError"
import type { ClusterDelivery } from "../../src/cluster/ClusterDelivery.js"
import type { ClusterQueue } from "../../src/cluster/ClusterQueue.js"
import * as Ingress from "../../src/cluster/Ingress.js"
import type { PgDeliveryLog } from "../../src/cluster/PgDeliveryLog.js"
import { freePort } from "./support.js"

describe("Ingress: a message not taken", () => {
  it.live("a failed dispatch is a 500 naming the cause and saying the message was not accepted, and a warning", () =>
    Effect.gen(function*() {
      const warnings: Array<string> = []
      const capture = Logger.make((o) => {
        if (o.logLevel === "Warn") {
          warnings.push((Array.isArray(o.message) ? o.message : [o.message]).map(String).join(" "))
        }
      })
      const port = yield* Effect.promise(freePort)
      let dispatched = 0
      const queue = {
        member: "runner-test",
        dispatch: () => {
          dispatched++
          return Effect.fail(
            new SqlError({
              reason: new ConnectionError({
                cause: new Error("ECONNREFUSED"),
                message: "PgConnection: Failed to connect"
              })
            })
          )
        }
      } as unknown as ClusterQueue
      const res = yield* Effect.scoped(Effect.gen(function*() {
        yield* Ingress.serve({
          queue,
          delivery: {} as ClusterDelivery,
          outbox: {} as PgDeliveryLog,
          port
        })
        return yield* Effect.promise(async () => {
          const r = await fetch(`http://127.0.0.1:${port}/sessions/bob/messages?wait=1000`, {
            method: "POST",
            body: JSON.stringify({ text: "hello" })
          })
          return { status: r.status, body: await r.json() as { _tag: string; error: string; reason: string } }
        })
      })).pipe(Effect.provide(Logger.layer([capture])))
      assert.strictEqual(dispatched, 1)
      assert.strictEqual(res.status, 500)
      assert.strictEqual(res.body._tag, "Internal")
      assert.strictEqual(res.body.reason, "internal")
      assert.include(res.body.error, "PgConnection: Failed to connect")
      assert.include(res.body.error, "it was not accepted: send it again")
      const w = warnings.find((x) => x.includes("ingress: a message to session bob was not taken"))
      assert.isDefined(w, warnings.join("\n"))
      assert.include(w!, "PgConnection: Failed to connect")
    }))
})
