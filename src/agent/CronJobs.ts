/**
 * Cron jobs of an agent: parsing and validating their schedules (Effect's `Cron`: 5 fields, or 6
 * with seconds first, optionally in a time zone), and the loop that fires a job at each due time
 * on the Effect `Clock` (so tests drive it with `TestClock`).
 */
// Modules of effect, not its index: the chatbot's command line checks --cron with this file before
// the agent loads, and `--help`, `--version` or a bad option should not load all of effect.
import * as Clock from "effect/Clock"
import * as Cron from "effect/Cron"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import { AgentConfigInvalid } from "./errors.js"

/** A cron job: at every due time of `schedule`, a turn with `prompt` in the session `cron:<name>`. */
export interface CronJob {
  readonly name: string
  /** A cron expression: 5 fields, or 6 with seconds first. */
  readonly schedule: string
  readonly prompt: string
  /** The recipient of the job's replies (default: the last active session). */
  readonly to?: string
  /** An IANA time zone for the schedule (default: UTC). */
  readonly timeZone?: string
}

/** A job whose schedule has been parsed. */
export interface ParsedCronJob extends CronJob {
  readonly cron: Cron.Cron
}

/** The session a job's runs use. */
export const cronSession = (name: string): string => `cron:${name}`

/**
 * Validates the jobs: every name non-empty and unique, every prompt non-empty, every schedule a
 * valid cron expression. Fails with `AgentConfigInvalid` naming the first bad field.
 */
export const parseJobs = (
  jobs: ReadonlyArray<CronJob>,
  field = "cron"
): Effect.Effect<ReadonlyArray<ParsedCronJob>, AgentConfigInvalid> =>
  Effect.suspend(() => {
    const seen = new Set<string>()
    const out: Array<ParsedCronJob> = []
    for (let i = 0; i < jobs.length; i++) {
      const job = jobs[i]!
      const at = `${field}[${i}]`
      if (typeof job.name !== "string" || job.name.trim() === "") {
        return Effect.fail(
          new AgentConfigInvalid({
            field: `${at}.name`,
            message: `Expected \`${at}.name\` to be a non-empty string, got \`${String(job.name)}\``
          })
        )
      }
      if (seen.has(job.name)) {
        return Effect.fail(
          new AgentConfigInvalid({
            field: `${at}.name`,
            message: `Expected cron job names to be unique, got \`${job.name}\` twice`
          })
        )
      }
      seen.add(job.name)
      if (typeof job.prompt !== "string" || job.prompt.trim() === "") {
        return Effect.fail(
          new AgentConfigInvalid({
            field: `${at}.prompt`,
            message: `Expected \`${at}.prompt\` to be a non-empty string, got \`${String(job.prompt)}\``
          })
        )
      }
      if (job.to !== undefined && (typeof job.to !== "string" || job.to === "")) {
        return Effect.fail(
          new AgentConfigInvalid({
            field: `${at}.to`,
            message: `Expected \`${at}.to\` to be a non-empty string, got \`${String(job.to)}\``
          })
        )
      }
      const parsed = Cron.parse(job.schedule, job.timeZone)
      if (Result.isFailure(parsed)) {
        return Effect.fail(
          new AgentConfigInvalid({
            field: `${at}.schedule`,
            message: `Expected \`${at}.schedule\` to be a cron expression of 5 fields (or 6 with seconds first)${
              job.timeZone === undefined ? "" : " and a known time zone"
            }, got \`${job.schedule}\`: ${parsed.failure.message}`
          })
        )
      }
      out.push({ ...job, cron: parsed.success })
    }
    return Effect.succeed(out)
  })

/**
 * Parses the chatbot's `--cron` value, `<expression>|<prompt>`; the job is named `cron-<index>`.
 * Returns a message saying what is wrong, or the job.
 */
export const parseCronFlag = (value: string, index: number): CronJob | string => {
  const bar = value.indexOf("|")
  if (bar < 0) return `Expected \`--cron\` to be \`<expression>|<prompt>\`, got \`${value}\``
  const schedule = value.slice(0, bar).trim()
  const prompt = value.slice(bar + 1).trim()
  if (prompt === "") return `Expected \`--cron\` to have a prompt after \`|\`, got \`${value}\``
  const parsed = Cron.parse(schedule)
  if (Result.isFailure(parsed)) {
    return `Expected \`--cron\` to start with a cron expression of 5 fields (or 6 with seconds first), got \`${schedule}\``
  }
  return { name: `cron-${index}`, schedule, prompt }
}

/**
 * Runs `tick` at every due time of `cron`, forever, on the Effect `Clock`. Each due time fires
 * once: a clock that wakes early never fires the same time twice, and `tick` is expected to return
 * at once (it dispatches; it does not wait for the run).
 */
export const runSchedule = <E, R>(cron: Cron.Cron, tick: Effect.Effect<void, E, R>): Effect.Effect<never, E, R> =>
  Effect.gen(function*() {
    let last = yield* Clock.currentTimeMillis
    while (true) {
      const due = Cron.next(cron, last).getTime()
      const now = yield* Clock.currentTimeMillis
      if (due > now) yield* Effect.sleep(due - now)
      last = due
      yield* tick
    }
  })
