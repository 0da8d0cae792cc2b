/**
 * The write-ahead delivery log: `DeliveryLog.open` opens the embedded segmented file log
 * (format and recovery rule: docs/delivery-log-format.md). Use it as `DeliveryLog.open({ dir })`;
 * `DeliveryLog.DeliveryLog` is the interface every store implements.
 */
import type { Effect, Scope } from "effect"
import type { DeliveryLogError } from "./errors.js"
import { openFileLog } from "./fileLog.js"
import type { DeliveryLog as DeliveryLogInterface } from "./types.js"
import type { OpenOptions as FileLogOptions } from "./validate.js"

/** A durable store of outbound messages (the interface every store implements). */
export type DeliveryLog = DeliveryLogInterface

/** Options of the file log; see each field. */
export type OpenOptions = FileLogOptions

/**
 * Open (creating if needed, mode 0700) the file log in `options.dir`: take its lock, recover (a torn
 * tail of the last segment is cut; corruption anywhere else fails with `reason: "corrupt"` and changes
 * nothing), and return the log. Closing the Scope flushes it and releases the lock. With the default
 * `fsync: "always"` every mutating call returns only once its record is on disk; overlapping calls
 * share one fdatasync. An `ack` of an id acked within `dedupeWindowMs` succeeds without writing;
 * after the window the id is forgotten (`unknown-id`). Fails `invalid` (an option, named),
 * `locked` (another live process has the directory), `corrupt` (file and offset) or `io`.
 */
export const open = (options: OpenOptions): Effect.Effect<DeliveryLog, DeliveryLogError, Scope.Scope> =>
  openFileLog(options)
