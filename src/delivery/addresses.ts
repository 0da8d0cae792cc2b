/**
 * Where an entry's record is, as one number: an address in a space where every file of the log has
 * its own range (`base` + offset). Recovery lays the files it read side by side from 0; the writer's
 * bytes follow (a record's address is known when it is framed, before the writer picks its
 * segment); a snapshot written later gets a range of its own far above. `locate` turns an address
 * back into a file code and an offset (what the dedupe window keeps).
 */

/** Snapshots written by this process get ranges from here (the writer never gets this far). */
export const SNAPSHOT_BASE = 2 ** 52

export class Addresses {
  /** Sorted by base. `code` -1: the file is gone. */
  private readonly files: Array<{ readonly base: number; code: number }> = []

  /** File `code`'s range starts at `base`. */
  add(code: number, base: number): void {
    let i = this.files.length
    while (i > 0 && this.files[i - 1]!.base > base) i--
    this.files.splice(i, 0, { base, code })
  }

  /** File `code` was deleted: its addresses locate nothing. */
  drop(code: number): void {
    for (const f of this.files) if (f.code === code) f.code = -1
  }

  /** The file code and offset of `address` into `out[0]`, `out[1]`; false if it is in no file (or past 2^32 in it). */
  locate(address: number, out: Uint32Array): boolean {
    const files = this.files
    let lo = 0
    let hi = files.length - 1
    if (address < 0 || hi < 0 || address < files[0]!.base) return false
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1
      if (files[mid]!.base <= address) lo = mid
      else hi = mid - 1
    }
    const f = files[lo]!
    const offset = address - f.base
    if (f.code < 0 || offset > 0xffff_ffff) return false
    out[0] = f.code
    out[1] = offset
    return true
  }

  /** The address of `offset` in file `code`, or -1 if the file has no range. */
  addressOf(code: number, offset: number): number {
    for (const f of this.files) if (f.code === code) return f.base + offset
    return -1
  }
}
