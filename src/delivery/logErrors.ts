/** The errors the log core's calls fail with (the messages say what was expected and what to do). */
import { DeliveryLogError } from "./errors.js"

/** A write or sync of the log failed: the log heals itself through recovery (healer.ts). */
export const ioError = (dir: string, e: unknown): DeliveryLogError =>
  new DeliveryLogError({
    reason: "io",
    message: `Writing the delivery log failed (${
      (e as NodeJS.ErrnoException)?.code ?? String(e)
    }); the log re-opens itself through recovery (see health) and keeps every record reported durable; free the space or fix the disk`,
    path: dir
  })

export const closedError = (): DeliveryLogError =>
  new DeliveryLogError({ reason: "closed", message: "The delivery log is closed; open it again to use it" })

export const unknownId = (id: string): DeliveryLogError =>
  new DeliveryLogError({
    reason: "unknown-id",
    message:
      `Expected the id of an entry in the log, got \`${id}\`: it was never appended here, or it was acked more than \`dedupeWindowMs\` ago`
  })

/** A call's input is not what it takes. */
export const invalid = (message: string): DeliveryLogError => new DeliveryLogError({ reason: "invalid", message })

/** A call that needs a pending entry got a dead one. */
export const notPending = (message: string): DeliveryLogError =>
  new DeliveryLogError({ reason: "not-pending", message })
