/** Shared helpers of the cluster tests: free ports, one in-process runner. */
import { Effect, Layer } from "effect"
import type { Scope } from "effect"
import * as net from "node:net"
import * as ClusterLayer from "../../src/cluster/ClusterLayer.js"

/** A TCP port free right now on loopback. */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

/** The cluster runtime of one runner in this process, for the Scope's lifetime. */
export const runnerContext = (url: string, port: number) =>
  Layer.build(ClusterLayer.layer({ postgres: url, port, shardsPerGroup: 16, maxConnections: 6 })) as Effect.Effect<
    any,
    unknown,
    Scope.Scope
  >
