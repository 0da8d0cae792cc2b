/**
 * A runner that cannot start says so in one line: the runner command, spawned as `npm run runner`
 * runs it, with Postgres on a closed port, a database that does not exist, its HTTP port or its
 * cluster port taken by another process. Each exits 1 and prints `runner: <what failed>: <how to fix
 * it>` alone on standard error (no stack trace), and nothing on standard output (no ready line).
 */
import { spawn } from "node:child_process"
import * as net from "node:net"
import * as path from "node:path"
import { describe, expect, it } from "vitest"
import { nodeArgs } from "../support/node.js"
import { ADMIN_URL, postgresAvailable, useFreshDatabase } from "./pg.js"
import { freePort } from "./support.js"

const up = await postgresAvailable("test/cluster/Startup.test.ts")
const root = path.resolve(import.meta.dirname, "../..")

/** Runs the runner command to its end: its exit code, standard output and standard error. */
const runner = (args: ReadonlyArray<string>) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeArgs("src/cluster/runner-main.ts"), ...args], {
      cwd: root,
      env: { ...process.env, SWITCHYARD_TOKEN: "", SWITCHYARD_DEBUG: "" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (d: Buffer) => void (stdout += d.toString()))
    child.stderr.on("data", (d: Buffer) => void (stderr += d.toString()))
    // A runner that started after all is a failure of the test, not a hang: it is stopped after 100 s
    // (four runners load tsx and effect at once; on two busy cores that alone has taken 28 s).
    const timer = setTimeout(() => child.kill("SIGKILL"), 100_000)
    child.once("error", reject)
    child.once("exit", (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })

/** A listener on a free loopback port, held by this process (the port "in use"). */
const holdPort = () =>
  new Promise<{ port: number; close: () => Promise<void> }>((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () =>
      resolve({
        port: (server.address() as net.AddressInfo).port,
        close: () => new Promise((r) => server.close(() => r()))
      }))
  })

describe("a runner given a port that is not one", () => {
  it("--port or --cluster-port above 65535, or a --port whose default cluster port is: one line, exit 1", async () => {
    const postgres = "postgres://postgres@127.0.0.1:1/never_reached"
    const [port, cluster, derived] = await Promise.all([
      runner(["--postgres", postgres, "--port", "99999"]),
      runner(["--postgres", postgres, "--port", "8080", "--cluster-port", "70000"]),
      runner(["--postgres", postgres, "--port", "65000"])
    ])
    expect([port, cluster, derived].map((r) => ({ code: r.code, stdout: r.stdout, stderr: r.stderr }))).toEqual([
      {
        code: 1,
        stdout: "",
        stderr:
          "error: option '--port <n>' argument '99999' is invalid. Expected `--port` to be an integer from 1 to 65535, got `99999`\n"
      },
      {
        code: 1,
        stdout: "",
        stderr:
          "error: option '--cluster-port <n>' argument '70000' is invalid. Expected `--cluster-port` to be an integer from 1 to 65535, got `70000`\n"
      },
      {
        code: 1,
        stdout: "",
        stderr: "runner: --cluster-port defaults to --port + 1000 = 66000, above 65535: give --cluster-port\n"
      }
    ])
  }, 60_000)
})

describe.skipIf(!up)("a runner that cannot start (Postgres)", () => {
  const db = useFreshDatabase("startup")

  it(
    "prints one line that names what failed and how to fix it, exits 1: Postgres down, no such database, the HTTP port or the cluster port in use",
    async () => {
      const closed = await freePort() // nothing listens there: Postgres "down"
      const [http, cluster] = await Promise.all([holdPort(), holdPort()])
      const missing = new URL(ADMIN_URL)
      missing.pathname = "/switchyard_no_such_database"
      try {
        const [down, noDb, httpInUse, clusterInUse] = await Promise.all([
          runner(["--postgres", `postgres://postgres@127.0.0.1:${closed}/x`, "--port", String(await freePort())]),
          runner(["--postgres", missing.toString(), "--port", String(await freePort())]),
          runner(["--postgres", db.url, "--port", String(http.port), "--cluster-port", String(await freePort())]),
          runner(["--postgres", db.url, "--port", String(await freePort()), "--cluster-port", String(cluster.port)])
        ])
        const seen = [down, noDb, httpInUse, clusterInUse].map((r) => ({
          code: r.code,
          stdout: r.stdout,
          lines: r.stderr.trimEnd().split("\n")
        }))
        const oneLine = (line: RegExp) => ({ code: 1, stdout: "", lines: [expect.stringMatching(line)] })
        expect(seen).toEqual([
          oneLine(
            new RegExp(
              `^runner: cannot reach Postgres at 127\\.0\\.0\\.1:${closed} \\(connection refused\\): start Postgres there, or fix --postgres`
            )
          ),
          oneLine(
            /^runner: Postgres at [^ ]+: database "switchyard_no_such_database" does not exist; create it \(createdb -h [^)]* switchyard_no_such_database\)/
          ),
          oneLine(
            new RegExp(
              `^runner: cannot listen on 127\\.0\\.0\\.1:${http.port} \\(--port, the HTTP ingress\\): the port is in use by another process`
            )
          ),
          oneLine(
            new RegExp(
              `^runner: cannot listen on 127\\.0\\.0\\.1:${cluster.port} \\(--cluster-port, runner to runner; default --port \\+ 1000\\): the port is in use`
            )
          )
        ])
      } finally {
        await Promise.all([http.close(), cluster.close()])
      }
    },
    120_000
  )
})
