/** Creating the agent's state folder: level by level (Node 20's recursive `mkdirSync` spins forever on some paths, e.g. under `/proc`). */
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { AgentConfigInvalid } from "./errors.js"

const message = (cause: unknown): string => (cause instanceof Error ? cause.message : String(cause))

/**
 * Creates `dir` (0700) and its missing parents, one level at a time, or fails with
 * `AgentConfigInvalid` (`field: "stateDir"`) naming the path and the system's reason.
 */
export const ensureStateDir = (dir: string): Effect.Effect<void, AgentConfigInvalid> =>
  Effect.try({
    try: () => {
      const missing: Array<string> = []
      let at = dir
      while (!fs.existsSync(at)) {
        missing.push(at)
        const up = path.dirname(at)
        if (up === at) break
        at = up
      }
      for (const d of missing.reverse()) fs.mkdirSync(d, { mode: 0o700 })
      if (!fs.statSync(dir).isDirectory()) throw new Error(`ENOTDIR: not a directory, '${dir}'`)
    },
    catch: (cause) =>
      new AgentConfigInvalid({ field: "stateDir", message: `Cannot create \`stateDir\` ${dir}: ${message(cause)}` })
  })
