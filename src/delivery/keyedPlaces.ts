/**
 * Where the records of keyed entries are, for the open log: the writer's bytes get addresses as
 * they are framed (addresses.ts), a keyed entry acked within the window is read back from its
 * record on a repeated key, and a compaction moves those records into its snapshot. LogCore's part
 * of the dedupe window that is not on the append path.
 */
import { WrongRecord } from "./ackedWindow.js"
import { type Addresses, SNAPSHOT_BASE } from "./addresses.js"
import { removeCheckpoint } from "./checkpoint.js"
import type { Captured, WrittenSnapshot } from "./compaction.js"
import { CorruptLog } from "./corrupt.js"
import type { EntryData } from "./entryData.js"
import { DeliveryLogError } from "./errors.js"
import { fsErrorPath } from "./fsError.js"
import { RecordReader } from "./recordReader.js"
import type { KeptSegment } from "./recovery.js"
import { codeNumber, fileCode } from "./segment.js"
import type { LogState } from "./state.js"
import { parseUuid } from "./uuidWords.js"

/** Scratch: a located record (file code, offset), and an id's 128 bits. */
const place = new Uint32Array(2)
const idWords = new Uint32Array(4)

/** A failed read of an acked entry's record (to check a repeated idempotency key against it). */
export const readFailure = (dir: string, e: unknown): DeliveryLogError =>
  e instanceof CorruptLog || e instanceof WrongRecord
    ? new DeliveryLogError({
      reason: "corrupt",
      message:
        `The delivery log is corrupt: checking an idempotency key against the entry acked with it found ${e.message}; nothing was written (re-open the log: recovery says what is damaged)`,
      path: e instanceof CorruptLog ? e.path : dir
    })
    : new DeliveryLogError({
      reason: "io",
      message: `Reading the delivery log failed (${
        (e as NodeJS.ErrnoException)?.code ?? String(e)
      }) while checking an idempotency key against the entry acked with it; nothing was written`,
      path: fsErrorPath(e) ?? dir
    })

export class KeyedPlaces {
  /** Bytes the writer has written since open (the next one's address is `writerBase` + this). */
  private writtenPos = 0
  /** Segments that have their range of addresses. */
  private readonly placed = new Set<number>()
  private lastPlaced: number
  /** The next range for a snapshot this log writes. */
  private snapshotBase = SNAPSHOT_BASE
  /** Reads acked entries back (a repeated idempotency key), opened on the first need. */
  private reader: RecordReader | undefined

  constructor(
    private readonly dir: string,
    private readonly maxPayload: number,
    private readonly addresses: Addresses,
    /** The address of the writer's first byte. */
    private readonly writerBase: number,
    active: number
  ) {
    this.placed.add(active)
    this.lastPlaced = active
  }

  /** The address of the record framed at `at` of the writer's staging buffer, `taken` bytes after its first. */
  addressOf(taken: number, at: number): number {
    return this.writerBase + taken + at
  }

  /** The writer appended `bytes` to segment `number`, which held `before` bytes. */
  written(number: number, before: number, bytes: number): void {
    if (number !== this.lastPlaced) {
      this.lastPlaced = number
      if (!this.placed.has(number)) {
        this.placed.add(number)
        this.addresses.add(fileCode(number, "log"), this.writerBase + this.writtenPos - before)
      }
    }
    this.writtenPos += bytes
  }

  /** The entry in the record at `offset` of file `code` (throws `CorruptLog`, `WrongRecord` or the I/O error). */
  readonly read = (code: number, offset: number): EntryData =>
    (this.reader ??= new RecordReader(this.dir, this.maxPayload)).entryAt(code, offset)

  /**
   * Snapshot `reserved` now holds the records of keyed acked entries and of the live entries that were
   * in the files it replaces (`replaced`, still there): point the dedupe window and the live entries
   * at it, then forget them.
   */
  installed(
    state: LogState,
    reserved: number,
    captured: Captured,
    snap: WrittenSnapshot,
    replaced: ReadonlyArray<KeptSegment>
  ): void {
    const code = fileCode(reserved, "snap")
    const base = this.snapshotBase
    this.snapshotBase += snap.size
    this.addresses.add(code, base)
    const k = captured.acked.keyed
    for (let i = 0; i < k.count; i++) {
      state.acked.relocate(k.words.subarray(4 * i, 4 * i + 4), reserved, code, snap.keyedAt[i]!)
    }
    for (let i = 0; i < captured.entries.length; i++) {
      const { id, key } = captured.entries.at(i)!
      const offset = snap.entriesAt[i]!
      const slot = state.live.slotOf(id)
      if (slot >= 0) {
        const pos = state.live.posOf(slot)
        if (!this.addresses.locate(pos, place) || codeNumber(place[0]!) < reserved) {
          state.live.setPos(slot, base + offset)
        }
      } else if (key !== undefined && parseUuid(id, idWords)) state.acked.relocate(idWords, reserved, code, offset)
    }
    for (const s of replaced) {
      const c = fileCode(s.number, s.kind)
      this.addresses.drop(c)
      this.reader?.drop(c)
    }
    try {
      removeCheckpoint(this.dir)
    } catch {
      // A stale checkpoint names files that are gone: the next open ignores it.
    }
  }

  /** Close the reader of acked entries' records. */
  close(): void {
    this.reader?.close()
  }
}
