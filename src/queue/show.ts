/**
 * How the queue's messages show a value, in p-queue's tone: what was expected, what was given.
 * Internal to `src/queue` (not exported from the package).
 */

/** `value` as it appears between backticks in a message: strings quoted, functions as `function`; never throws. */
export const show = (value: unknown): string => {
  if (typeof value === "string") return JSON.stringify(value)
  if (typeof value === "function") return "function"
  try {
    return String(value)
  } catch {
    return Object.prototype.toString.call(value)
  }
}

/** ``Expected `field` to be what, got `value` ``. */
export const expected = (field: string, what: string, value: unknown): string =>
  `Expected \`${field}\` to be ${what}, got \`${show(value)}\``
