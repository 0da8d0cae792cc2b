/**
 * Validation of `createLanes` options: every bad option is a `LanesConfigInvalid` that names the
 * option and says, in p-queue's tone, what was expected and what was given.
 */
import { LanesConfigInvalid, MAX_QUEUED } from "../errors.js"
import { expected } from "../show.js"

const invalid = (field: string, what: string, value: unknown) =>
  new LanesConfigInvalid({ field, message: expected(field, what, value) })

/** The first bad option of `options`, or `undefined` when every option is valid. */
export const validateLanesOptions = (options: unknown): LanesConfigInvalid | undefined => {
  if (typeof options !== "object" || options === null) {
    return invalid("options", "an object", options)
  }
  const o = options as Record<string, unknown>
  const mc = o.maxConcurrent
  if (typeof mc !== "number" || !Number.isInteger(mc) || mc < 1) {
    return invalid("maxConcurrent", "an integer from 1 and up", mc)
  }
  const mq = o.maxQueued
  if (mq !== undefined && (typeof mq !== "number" || !Number.isInteger(mq) || mq < 0 || mq > MAX_QUEUED)) {
    return invalid("maxQueued", `an integer from 0 through ${MAX_QUEUED}`, mq)
  }
  const tt = o.turnTimeoutMs
  if (tt !== undefined && (typeof tt !== "number" || !Number.isFinite(tt) || tt <= 0)) {
    return invalid("turnTimeoutMs", "a finite number greater than 0", tt)
  }
  if (typeof o.activate !== "function") {
    return invalid("activate", "a function", o.activate)
  }
  if (o.onExit !== undefined && typeof o.onExit !== "function") {
    return invalid("onExit", "a function when given", o.onExit)
  }
  return undefined
}
