/**
 * Validation of the command queue's options (`LanesConfigInvalid`, with the option's path as
 * `field`) and of each dispatch (`RequestError`). Messages follow p-queue's tone: what was
 * expected, what was given.
 */
import { LanesConfigInvalid, MAX_QUEUED } from "../errors.js"
import type { Participation } from "../errors.js"
import { expected } from "../show.js"
import type { TaskReport, WaitInfo } from "../types.js"

/** The lanes every queue has, merged under the caller's `lanes`. */
export const DEFAULT_LANES: Readonly<
  Record<string, {
    readonly concurrent: number
    readonly queued: number
    readonly participation: Participation
    readonly warnAfterMs?: number
  }>
> = {
  main: { concurrent: 4, queued: 64, participation: "blocking", warnAfterMs: 2_000 },
  heartbeat: { concurrent: 1, queued: 8, participation: "background" },
  cron: { concurrent: 2, queued: 32, participation: "background" }
}

export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000
export const DEFAULT_AUDIT_TIMEOUT_MS = 1_000
export const DEFAULT_FINALIZATION_TIMEOUT_MS = 5_000
export const DEFAULT_AGING_MS = 5_000
export const DEFAULT_IDLE_MS = 60_000
/** The lanes that every queue keeps: `removeLane` refuses them. */
export const PERMANENT_LANES: ReadonlySet<string> = new Set(Object.keys(DEFAULT_LANES))

const isInt = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v)
const isTimeout = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v) && v > 0

/** The message for a bad timeout, or undefined when `value` is absent or a finite number > 0. */
export const checkTimeout = (field: string, value: unknown): string | undefined =>
  value === undefined || isTimeout(value) ? undefined : expected(field, "a finite number greater than 0", value)

/** A lane's resolved limits. */
export interface ResolvedLimits {
  readonly concurrent: number
  readonly queued: number
  readonly participation: Participation
  readonly turnTimeoutMs: number | undefined
  readonly queueTimeoutMs: number | undefined
  readonly warnAfterMs: number | undefined
  readonly finalizationTimeoutMs: number
  /** Milliseconds of waiting that add 1 to a task's effective priority. */
  readonly agingMs: number
  readonly abortGraceMs: number | undefined
}

/** The message for a bad wait deadline (`drain`'s, a Promise future's `wait`): a number from 0 up; or undefined. */
export const checkWaitTimeout = (timeoutMs: unknown): string | undefined =>
  typeof timeoutMs === "number" && !Number.isNaN(timeoutMs) && timeoutMs >= 0
    ? undefined
    : expected("timeoutMs", "a number from 0 and up", timeoutMs)

/** The resolved options of `CommandQueue.make`. */
export interface ResolvedOptions {
  readonly lanes: ReadonlyArray<readonly [string, ResolvedLimits]>
  /** The limits of a lane made by a dispatch to an unknown name, and how long it may idle. */
  readonly unknownLane: { readonly limits: ResolvedLimits; readonly idleMs: number } | undefined
  readonly groups: ReadonlyArray<
    { readonly name: string; readonly concurrent: number; readonly lanes: ReadonlyArray<string> }
  >
  readonly drainTimeoutMs: number
  readonly auditTimeoutMs: number
  readonly onTaskExit: ((report: TaskReport) => unknown) | undefined
  readonly onWait: ((info: WaitInfo) => unknown) | undefined
}

const fail = (field: string, message: string) => new LanesConfigInvalid({ field, message })

/**
 * Resolves lane limits given at `path` (`lanes.main`, `limits`, `unknownLane`) over `base` (a
 * default lane's limits, or a lane's current ones), or names the first bad one.
 */
export const resolveLimitsAt = (
  path: string,
  given: unknown,
  base: object | undefined
): ResolvedLimits | LanesConfigInvalid => {
  if (typeof given !== "object" || given === null || Array.isArray(given)) {
    return fail(path, expected(path, "an object of lane limits", given))
  }
  const g = given as Record<string, unknown>
  const d = base as Record<string, unknown> | undefined
  const pick = (field: string): unknown => (g[field] !== undefined ? g[field] : d?.[field])
  const concurrent = pick("concurrent")
  if (!isInt(concurrent) || concurrent < 1) {
    return fail(`${path}.concurrent`, expected(`${path}.concurrent`, "an integer from 1 and up", concurrent))
  }
  const queued = pick("queued")
  if (!isInt(queued) || queued < 0 || queued > MAX_QUEUED) {
    return fail(`${path}.queued`, expected(`${path}.queued`, `an integer from 0 through ${MAX_QUEUED}`, queued))
  }
  const participation = pick("participation") ?? "blocking"
  if (participation !== "blocking" && participation !== "background") {
    return fail(`${path}.participation`, expected(`${path}.participation`, "`blocking` or `background`", participation))
  }
  for (
    const field of [
      "turnTimeoutMs",
      "queueTimeoutMs",
      "warnAfterMs",
      "finalizationTimeoutMs",
      "agingMs",
      "abortGraceMs"
    ]
  ) {
    const message = checkTimeout(`${path}.${field}`, pick(field))
    if (message !== undefined) return fail(`${path}.${field}`, message)
  }
  return {
    concurrent,
    queued,
    participation,
    turnTimeoutMs: pick("turnTimeoutMs") as number | undefined,
    queueTimeoutMs: pick("queueTimeoutMs") as number | undefined,
    warnAfterMs: pick("warnAfterMs") as number | undefined,
    finalizationTimeoutMs: (pick("finalizationTimeoutMs") as number | undefined) ?? DEFAULT_FINALIZATION_TIMEOUT_MS,
    agingMs: (pick("agingMs") as number | undefined) ?? DEFAULT_AGING_MS,
    abortGraceMs: pick("abortGraceMs") as number | undefined
  }
}

const resolveLane = (name: string, given: unknown): ResolvedLimits | LanesConfigInvalid =>
  resolveLimitsAt(`lanes.${name}`, given, DEFAULT_LANES[name])

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

const resolveUnknownLane = (given: unknown): ResolvedOptions["unknownLane"] | LanesConfigInvalid => {
  if (given === undefined) return undefined
  const limits = resolveLimitsAt("unknownLane", given, undefined)
  if (limits instanceof LanesConfigInvalid) return limits
  const idleMs = (given as Record<string, unknown>).idleMs
  const bad = checkTimeout("unknownLane.idleMs", idleMs)
  if (bad !== undefined) return fail("unknownLane.idleMs", bad)
  return { limits, idleMs: (idleMs as number | undefined) ?? DEFAULT_IDLE_MS }
}

const resolveGroups = (
  given: unknown,
  lanes: ReadonlyArray<string>
): ResolvedOptions["groups"] | LanesConfigInvalid => {
  if (given === undefined) return []
  if (!isRecord(given)) return fail("groups", expected("groups", "an object of capacity groups by name", given))
  const out: Array<ResolvedOptions["groups"][number]> = []
  const owner = new Map<string, string>()
  for (const [name, g] of Object.entries(given)) {
    const path = `groups.${name}`
    if (name.length === 0) return fail("groups", "Expected every group name to be a non-empty string, got `\"\"`")
    if (!isRecord(g)) return fail(path, expected(path, "an object `{ concurrent, lanes }`", g))
    const concurrent = g.concurrent
    if (!isInt(concurrent) || concurrent < 1) {
      return fail(`${path}.concurrent`, expected(`${path}.concurrent`, "an integer from 1 and up", concurrent))
    }
    const members = g.lanes
    if (!Array.isArray(members) || members.length === 0) {
      return fail(`${path}.lanes`, expected(`${path}.lanes`, "a non-empty array of lane names", members))
    }
    for (const lane of members as ReadonlyArray<unknown>) {
      if (typeof lane !== "string" || !lanes.includes(lane)) {
        const names = lanes.map((l) => `\`${l}\``).join(", ")
        return fail(`${path}.lanes`, expected(`${path}.lanes`, `an array of lane names among ${names}`, lane))
      }
      const other = owner.get(lane)
      if (other !== undefined) {
        return fail(
          `${path}.lanes`,
          `Expected a lane to be in at most one group, got \`${lane}\` in \`${other}\` and \`${name}\``
        )
      }
      owner.set(lane, name)
    }
    out.push({ name, concurrent, lanes: members as ReadonlyArray<string> })
  }
  return out
}

/** Resolves `CommandQueue.make`'s options over the defaults, or names the first bad one. */
export const resolveOptions = (options: unknown): ResolvedOptions | LanesConfigInvalid => {
  if (options === undefined) options = {}
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    return fail("options", expected("options", "an object", options))
  }
  const o = options as Record<string, unknown>
  const lanesGiven = o.lanes === undefined ? {} : o.lanes
  if (typeof lanesGiven !== "object" || lanesGiven === null || Array.isArray(lanesGiven)) {
    return fail("lanes", expected("lanes", "an object of lanes by name", lanesGiven))
  }
  const names = [...Object.keys(DEFAULT_LANES)]
  for (const name of Object.keys(lanesGiven)) {
    if (name.length === 0) return fail("lanes", "Expected every lane name to be a non-empty string, got `\"\"`")
    if (!names.includes(name)) names.push(name)
  }
  const lanes: Array<readonly [string, ResolvedLimits]> = []
  for (const name of names) {
    const given = (lanesGiven as Record<string, unknown>)[name]
    const resolved = resolveLane(name, given === undefined ? {} : given)
    if (resolved instanceof LanesConfigInvalid) return resolved
    lanes.push([name, resolved])
  }
  const drain = checkTimeout("drainTimeoutMs", o.drainTimeoutMs)
  if (drain !== undefined) return fail("drainTimeoutMs", drain)
  const audit = checkTimeout("auditTimeoutMs", o.auditTimeoutMs)
  if (audit !== undefined) return fail("auditTimeoutMs", audit)
  if (o.onTaskExit !== undefined && typeof o.onTaskExit !== "function") {
    return fail("onTaskExit", expected("onTaskExit", "a function when given", o.onTaskExit))
  }
  if (o.onWait !== undefined && typeof o.onWait !== "function") {
    return fail("onWait", expected("onWait", "a function when given", o.onWait))
  }
  const unknownLane = resolveUnknownLane(o.unknownLane)
  if (unknownLane instanceof LanesConfigInvalid) return unknownLane
  const groups = resolveGroups(o.groups, names)
  if (groups instanceof LanesConfigInvalid) return groups
  return {
    lanes,
    unknownLane,
    groups,
    drainTimeoutMs: (o.drainTimeoutMs as number | undefined) ?? DEFAULT_DRAIN_TIMEOUT_MS,
    auditTimeoutMs: (o.auditTimeoutMs as number | undefined) ?? DEFAULT_AUDIT_TIMEOUT_MS,
    onTaskExit: o.onTaskExit as ((report: TaskReport) => unknown) | undefined,
    onWait: o.onWait as ((info: WaitInfo) => unknown) | undefined
  }
}

/** The message for a bad dispatch option, or undefined. */
export const checkDispatchOptions = (options: unknown): string | undefined => {
  if (typeof options !== "object" || options === null) return expected("options", "an object", options)
  const o = options as Record<string, unknown>
  if (o.coalesce !== undefined && typeof o.coalesce !== "boolean") {
    return expected("coalesce", "a boolean", o.coalesce)
  }
  const qt = checkTimeout("queueTimeoutMs", o.queueTimeoutMs)
  if (qt !== undefined) return qt
  const tt = checkTimeout("turnTimeoutMs", o.turnTimeoutMs)
  if (tt !== undefined) return tt
  if (o.priority !== undefined && (typeof o.priority !== "number" || !Number.isFinite(o.priority))) {
    return expected("priority", "a finite number", o.priority)
  }
  if (o.finalizer !== undefined && typeof o.finalizer !== "function") {
    return expected("finalizer", "a function when given", o.finalizer)
  }
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) {
    return expected("signal", "an AbortSignal when given", o.signal)
  }
  return undefined
}

/** The message for a bad key, or undefined. */
export const checkKey = (key: unknown): string | undefined =>
  typeof key === "string" && key.length > 0 ? undefined : expected("key", "a non-empty string", key)
