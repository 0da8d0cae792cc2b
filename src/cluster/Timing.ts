/**
 * Where a message's time goes, for the cluster benchmark (`CLUSTER_BENCH_TIMING=1 npm run bench -- cluster`,
 * bench/timing.ts): with `SWITCHYARD_TIMING=<file>` in a runner's environment, each step of a message's path
 * (the ingress, the coalescing slot, effect/cluster's save and read, the turn's statements, the reply)
 * appends one JSON line `{ t, pid, id, point }` to that file (`t`: ms on the monotonic clock, {@link now};
 * `id`: the run id, or the session at the ingress and the HTTP server). Without it, {@link mark} returns at
 * once: a runner pays one check per step.
 */
import * as fs from "node:fs"

const file = process.env.SWITCHYARD_TIMING

/** Whether marks are recorded (`SWITCHYARD_TIMING` set). */
export const enabled = file !== undefined

/**
 * Now, as {@link mark} records it: ms on the machine's monotonic clock (`process.hrtime`, CLOCK_MONOTONIC),
 * which every process of the machine shares (the bench's client marks into the same file), rather than
 * each process's own `performance.timeOrigin`.
 */
export const now = (): number => Number(process.hrtime.bigint()) / 1e6

/** Records that `id` reached `point` at `t` (default now; only with `SWITCHYARD_TIMING` set). */
export const mark = (id: string, point: string, t?: number): void => {
  if (file === undefined) return
  fs.appendFileSync(file, JSON.stringify({ t: t ?? now(), pid: process.pid, id, point }) + "\n")
}
