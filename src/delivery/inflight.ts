/**
 * The appends staged and not yet durable, oldest first. The group-commit writer completes records in
 * the order they were staged, so one shared completion takes the oldest: no closure per append.
 * A ring of parallel arrays (doubling when full), so a log that is never idle does not grow it.
 */
import type { DeliveryLogError } from "./errors.js"
import type { DeliveryEntry } from "./types.js"

/** Completion of an append: an error, or the entry; `arg` is what the caller passed along (one function serves every call). */
export type AppendDone<X> = (error: DeliveryLogError | undefined, entry: DeliveryEntry | undefined, arg: X) => void

/** One append in flight, as `take` hands it back. */
export interface Taken {
  /** The entry's slot in the live entries (liveEntries.ts). */
  slot: number
  entry: DeliveryEntry
  done: AppendDone<unknown>
  arg: unknown
}

/** `n` empty slots (filled with `undefined`: a packed array, not a holey one). */
const slots = <A>(n: number): Array<A | undefined> => Array.from({ length: n }, () => undefined)

/** The in-flight appends of one log core. */
export class InFlight {
  private data = new Int32Array(64)
  private entries = slots<DeliveryEntry>(64)
  private dones = slots<AppendDone<unknown>>(64)
  private args = slots<unknown>(64)
  private head = 0
  size = 0
  /** Reused by `take` (read its fields before the next call). */
  private readonly taken: Taken = { slot: -1, entry: undefined!, done: undefined!, arg: undefined }

  push<X>(slot: number, entry: DeliveryEntry, done: AppendDone<X>, arg: X): void {
    if (this.size === this.data.length) this.grow()
    const i = (this.head + this.size) & (this.data.length - 1)
    this.data[i] = slot
    this.entries[i] = entry
    this.dones[i] = done as AppendDone<unknown>
    this.args[i] = arg
    this.size++
  }

  /** Remove the oldest and return it (in a shared object: read it at once). */
  take(): Taken {
    const i = this.head
    const t = this.taken
    t.slot = this.data[i]!
    t.entry = this.entries[i]!
    t.done = this.dones[i]!
    t.arg = this.args[i]
    this.entries[i] = undefined
    this.dones[i] = undefined
    this.args[i] = undefined
    this.head = (i + 1) & (this.data.length - 1)
    this.size--
    return t
  }

  private grow(): void {
    const n = this.data.length
    const order = <A>(a: Array<A | undefined>): Array<A | undefined> => {
      const out = slots<A>(n * 2)
      for (let k = 0; k < n; k++) out[k] = a[(this.head + k) & (n - 1)]
      return out
    }
    const data = new Int32Array(n * 2)
    for (let k = 0; k < n; k++) data[k] = this.data[(this.head + k) & (n - 1)]!
    this.data = data
    this.entries = order(this.entries)
    this.dones = order(this.dones)
    this.args = order(this.args)
    this.head = 0
  }
}
