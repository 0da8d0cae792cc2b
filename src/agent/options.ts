/** Validation of `Agent.make`'s options, in p-queue's tone: what was expected, what was given. */
import { Effect } from "effect"
import { AgentConfigInvalid } from "./errors.js"
import type { AgentOptions } from "./types.js"

const show = (value: unknown): string =>
  typeof value === "string" ? `"${value}"` : typeof value === "object" && value !== null ? "object" : String(value)

const bad = (field: string, expected: string, value: unknown) =>
  Effect.fail(
    new AgentConfigInvalid({ field, message: `Expected \`${field}\` to be ${expected}, got \`${show(value)}\`` })
  )

const isInt = (n: unknown, from: number): boolean => typeof n === "number" && Number.isInteger(n) && n >= from
const isPositive = (n: unknown): boolean => typeof n === "number" && Number.isFinite(n) && n > 0

/** Fails with `AgentConfigInvalid` naming the first bad option. */
export const validateOptions = (options: AgentOptions): Effect.Effect<void, AgentConfigInvalid> => {
  if (typeof options.stateDir !== "string" || options.stateDir === "") {
    return bad("stateDir", "a non-empty path", options.stateDir)
  }
  const channel = options.channel as Partial<AgentOptions["channel"]> | undefined
  if (channel === undefined || typeof channel.name !== "string" || channel.name === "") {
    return bad("channel.name", "a non-empty string", channel?.name)
  }
  if (typeof channel.send !== "function") return bad("channel.send", "a function", channel.send)
  if (options.historyLimit !== undefined && !isInt(options.historyLimit, 0)) {
    return bad("historyLimit", "an integer from 0 and up", options.historyLimit)
  }
  if (options.maxTokens !== undefined && !isInt(options.maxTokens, 1)) {
    return bad("maxTokens", "an integer from 1 and up", options.maxTokens)
  }
  if (options.heartbeat !== undefined) {
    if (!isPositive(options.heartbeat.everyMs)) {
      return bad("heartbeat.everyMs", "a finite number above 0", options.heartbeat.everyMs)
    }
    if (
      options.heartbeat.prompt !== undefined &&
      (typeof options.heartbeat.prompt !== "string" || options.heartbeat.prompt === "")
    ) {
      return bad("heartbeat.prompt", "a non-empty string", options.heartbeat.prompt)
    }
  }
  if (options.turnTimeoutMs !== undefined && !isPositive(options.turnTimeoutMs)) {
    return bad("turnTimeoutMs", "a finite number above 0", options.turnTimeoutMs)
  }
  if (options.drainTimeoutMs !== undefined && !isPositive(options.drainTimeoutMs)) {
    return bad("drainTimeoutMs", "a finite number above 0", options.drainTimeoutMs)
  }
  if (
    options.defaultSession !== undefined &&
    (typeof options.defaultSession !== "string" || options.defaultSession === "")
  ) {
    return bad("defaultSession", "a non-empty string", options.defaultSession)
  }
  if (options.system !== undefined && typeof options.system !== "string") {
    return bad("system", "a string", options.system)
  }
  if (options.fsync !== undefined && options.fsync !== "always" && options.fsync !== "never") {
    return bad("fsync", "`always` or `never`", options.fsync)
  }
  if (options.maxRecordBytes !== undefined && !isInt(options.maxRecordBytes, 1024)) {
    return bad("maxRecordBytes", "an integer from 1024 and up", options.maxRecordBytes)
  }
  if (options.maxMessagesPerTurn !== undefined && !isInt(options.maxMessagesPerTurn, 1)) {
    return bad("maxMessagesPerTurn", "an integer from 1 and up", options.maxMessagesPerTurn)
  }
  return Effect.void
}
