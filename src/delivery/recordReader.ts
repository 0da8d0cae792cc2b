/**
 * Reading one record back from where the dedupe window says it is (a file code and an offset):
 * the entry of an append record, a snapshot entry, or a snapshot acked record with its entry. Every
 * record read is checked as recovery checks it (length limit, CRC-32, kind, payload).
 */
import * as fs from "node:fs"
import { join } from "node:path"
import { CorruptLog } from "./corrupt.js"
import type { EntryData } from "./entryData.js"
import { BadPayload, readAcked, readAppend, readEntry } from "./payload.js"
import { decodeAt, describeInvalid, HEADER_BYTES, Kind } from "./record.js"
import { codeName } from "./segment.js"

export class RecordReader {
  private readonly fds = new Map<number, number>()
  private buf: Buffer
  private winCode = -1
  private winStart = 0
  private winLen = 0

  /**
   * `window`: bytes read at a time. `keep`: later reads may be served from the bytes read before (a
   * compaction reading sealed files in order); without it every read goes to the file (the active
   * segment may have been mid-write when a window was read: only a record that was durable before
   * the read is certain to be whole).
   */
  constructor(
    private readonly dir: string,
    private readonly maxPayload: number,
    private readonly window = 4096,
    private readonly keep = false
  ) {
    this.buf = Buffer.allocUnsafe(window)
  }

  private fd(code: number): number {
    let fd = this.fds.get(code)
    if (fd === undefined) {
      fd = fs.openSync(join(this.dir, codeName(code)), "r")
      this.fds.set(code, fd)
    }
    return fd
  }

  private fill(code: number, offset: number, want: number): void {
    const need = Math.max(want, this.window)
    if (this.buf.length < need) this.buf = Buffer.allocUnsafe(need)
    const fd = this.fd(code)
    let got = 0
    while (got < need) {
      const n = fs.readSync(fd, this.buf, got, need - got, offset + got)
      if (n === 0) break
      got += n
    }
    this.winCode = code
    this.winStart = offset
    this.winLen = got
  }

  /** The entry in the record at `offset` of file `code`. Throws `CorruptLog`, or the I/O error. */
  entryAt(code: number, offset: number): EntryData {
    const path = join(this.dir, codeName(code))
    const inWindow = (bytes: number): boolean =>
      this.winCode === code && offset >= this.winStart && offset + bytes <= this.winStart + this.winLen
    if (!inWindow(HEADER_BYTES)) this.fill(code, offset, HEADER_BYTES)
    let rel = offset - this.winStart
    if (this.winLen - rel < HEADER_BYTES) throw new CorruptLog(path, offset, describeInvalid("short-header"))
    const len = this.buf.readUInt32BE(rel + 4)
    if (len <= this.maxPayload && !inWindow(HEADER_BYTES + len)) {
      this.fill(code, offset, HEADER_BYTES + len)
      rel = 0
    }
    const avail = this.winLen - rel
    const r = decodeAt(this.buf, rel, avail, avail, this.maxPayload)
    if (!this.keep) this.winCode = -1
    if (typeof r === "string") throw new CorruptLog(path, offset, describeInvalid(r))
    try {
      switch (r.kind) {
        case Kind.append:
          return readAppend(r.buf, r.start, r.end)
        case Kind.snapshotEntry:
          return readEntry(r.buf, r.start, r.end)
        case Kind.snapshotAcked: {
          const e = readAcked(r.buf, r.start, r.end).entry
          if (e !== undefined) return e
        }
      }
    } catch (e) {
      if (e instanceof BadPayload) {
        throw new CorruptLog(path, offset, `a record whose payload does not decode (${e.message})`)
      }
      throw e
    }
    throw new CorruptLog(path, offset, `a record of kind ${r.kind} where an entry was expected`)
  }

  /** Forget file `code` (deleted). */
  drop(code: number): void {
    const fd = this.fds.get(code)
    if (fd === undefined) return
    this.fds.delete(code)
    if (this.winCode === code) this.winCode = -1
    fs.closeSync(fd)
  }

  close(): void {
    for (const code of [...this.fds.keys()]) this.drop(code)
  }
}
