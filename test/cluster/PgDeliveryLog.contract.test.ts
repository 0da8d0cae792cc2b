/** The Postgres delivery log passes the store-independent DeliveryLog contract (all but the file-only tests). */
import { Effect, Layer } from "effect"
import { afterAll, beforeAll, describe } from "vitest"
import * as PgDeliveryLog from "../../src/cluster/PgDeliveryLog.js"
import * as Postgres from "../../src/cluster/Postgres.js"
import { deliveryLogContract } from "../delivery/contract.js"
import { freshDatabase, postgresAvailable } from "./pg.js"

const up = await postgresAvailable("test/cluster/PgDeliveryLog.contract.test.ts")

describe.skipIf(!up)("PgDeliveryLog contract (Postgres)", () => {
  let db: { url: string; drop: () => Promise<void> } | undefined
  beforeAll(async () => {
    db = await freshDatabase("pgcontract")
  })
  afterAll(async () => {
    await db?.drop()
  })
  let tables = 0
  /** Opens the log on `table` with a client of its own (as a new process would). */
  const open = (table: string) =>
    Effect.gen(function*() {
      const client = yield* Layer.build(Postgres.layer(db!.url, { maxConnections: 2 }))
      return yield* PgDeliveryLog.make({ table }).pipe(Effect.provideContext(client))
    }).pipe(Effect.catchTag("SqlError", (e) => Effect.die(e)))
  deliveryLogContract("Postgres outbox", () => open(`contract_${++tables}`), () => {
    const table = `reopen_${++tables}`
    return () => open(table)
  })
})
