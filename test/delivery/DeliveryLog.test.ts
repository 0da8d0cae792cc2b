/** The file log against the store-independent contract (test/delivery/contract.ts). */
import { afterAll } from "@effect/vitest"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DeliveryLog } from "../../src/delivery/index.js"
import { deliveryLogContract } from "./contract.js"

const root = mkdtempSync(join(tmpdir(), "switchyard-log-contract-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))
let n = 0
const freshDir = (): string => join(root, `log-${n++}`)

deliveryLogContract(
  "file log (fsync always)",
  () => DeliveryLog.open({ dir: freshDir() }),
  () => {
    const dir = freshDir()
    return () => DeliveryLog.open({ dir })
  }
)

deliveryLogContract(
  "file log (fsync never, 4 KiB segments)",
  () => DeliveryLog.open({ dir: freshDir(), fsync: "never", segmentBytes: 4096 }),
  () => {
    const dir = freshDir()
    return () => DeliveryLog.open({ dir, fsync: "never", segmentBytes: 4096 })
  }
)
