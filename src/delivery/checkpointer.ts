/**
 * Writing the CHECKPOINT (checkpoint.ts): at a clean close, and while the log runs, so that an open
 * after a crash (SIGKILL, power loss: no close) replays only the records written since the last one
 * instead of every file (docs/delivery-log-format.md, "The checkpoint").
 *
 * A running checkpoint is captured in one synchronous step between calls: the state then is exactly
 * what replaying every record staged so far gives (each call stages its record and changes the state
 * in one step), so it stands for the log's bytes up to the address where the staged records end. The
 * capture writes the rings' arrays to `CHECKPOINT.tmp` as they are (no copy; into the page cache, not
 * synced) and serialises the entries. The rest waits for a marker queued behind those records (they
 * are durable), off the append path: the CRC-32 of the covered bytes not hashed yet is read back, the
 * entries and the header written, the file synced, renamed and the directory synced, all through the
 * thread pool. One runs at
 * a time, never during a compaction (which replaces the files it covers), and only when it pays: the
 * log has grown by a quarter of the size of the last checkpoint, and at least 4 MiB (or a segment, if
 * smaller), since that one was captured (so checkpoints write at most about four times the bytes the
 * log writes itself, and an open after a crash replays at most that much more than one from the
 * newest checkpoint), and by what keeps an open after a crash within a budget (`dueAfter`), and it
 * spares replaying at least as many acked ids as the live entries it copies. Each is written over the
 * file of the one before the newest (`SPARE`), whose pages the page cache holds already.
 */
import * as fs from "node:fs"
import { join } from "node:path"
import { crc32 } from "node:zlib"
import type { Addresses } from "./addresses.js"
import {
  captureCheckpoint,
  type CapturedCheckpoint,
  CHECKPOINT,
  type CheckpointStep,
  type Covered,
  dropCheckpoint,
  frameCheckpoint,
  keepSpare,
  writeCheckpoint
} from "./checkpoint.js"
import type { KeptSegment } from "./recovery.js"
import { withFile } from "./replay.js"
import { checksumFile, codeNumber, PAGE, ReadWindow, segmentName, skewed, SNAP_BIT } from "./segment.js"
import type { LogState } from "./state.js"

/** The log when a checkpoint is due: `state` is exactly the records staged before address `end`. */
export interface CaptureAt {
  readonly state: LogState
  readonly nextLsn: number
  readonly end: number
}

/** Queue a marker behind everything staged: `done` once it is durable (or with the writer's failure). */
export type Mark = (done: (error: Error | undefined) => void) => void

/**
 * Capture the log now into `CHECKPOINT.tmp` of `dir` (checkpoint.ts), its entries into `room` if they
 * fit. Throws the I/O error.
 */
const capture = (dir: string, at: CaptureAt, room?: Buffer): CapturedCheckpoint => {
  return captureCheckpoint(
    dir,
    { nextLsn: at.nextLsn, nextSeq: at.state.nextSeq, liveBytes: at.state.liveBytes },
    at.state.live,
    // Views of the rings' arrays: written out in this same step, before anything changes.
    at.state.acked.view(),
    room
  )
}

/**
 * The running checkpoints' entries are serialised into a buffer the log keeps (one runs at a time) while
 * they take at most this much: a fresh one each time was fresh pages to fault in (~12 µs each on the
 * bench machine's VM, ~500 for 25,000 pending entries, twice with the copy that framed them).
 */
const KEEP_ROOM_BYTES = 8 << 20
/** Room past the entries for the header and trailer `frameCheckpoint` puts after them. */
const ROOM_SLACK = 64 << 10

const writeAt = (fd: number, buf: Buffer, position: number): Promise<number> =>
  new Promise((resolve, reject) =>
    fs.write(fd, buf, 0, buf.length, position, (e, n) => (e === null ? resolve(n) : reject(e)))
  )
const truncateFd = (fd: number, length: number): Promise<void> =>
  new Promise((resolve, reject) => fs.ftruncate(fd, length, (e) => (e === null ? resolve() : reject(e))))
const fsyncFd = (fd: number): Promise<void> =>
  new Promise((resolve, reject) => fs.fsync(fd, (e) => (e === null ? resolve() : reject(e))))
const closeFd = (fd: number): Promise<void> =>
  new Promise((resolve, reject) => fs.close(fd, (e) => (e === null ? resolve() : reject(e))))

/** Does a checkpoint of `state` pay: it spares replaying acked ids, at least as many as the live entries it copies. */
const pays = (state: LogState): boolean => state.acked.size >= state.live.size

/**
 * The read buffer of the running checkpoints' CRC-32s, kept by the log (one checkpoint runs at a
 * time): a new one each time was fresh pages to fault in, ~13 µs each on the bench machine.
 */
const CHUNK = 256 << 10

/**
 * A running checkpoint is due once the log has written `1 / SHARE` of the last one's size since it was
 * captured: a quarter halves what an open after a crash replays at 1M keyed ids (~13 MB instead of
 * ~27). With format 1 (a capture copied the rings into a fresh buffer) that cost the fill ~14 % CPU and
 * it stayed at a half; the capture now writes the rings as they are (bench/README.md "Reopen after a
 * crash, round 3").
 */
const SHARE = 4
/** ... and not before the log has written this much (or a segment, if smaller) since the last one. */
const MIN_SINCE = 4 << 20
/**
 * ... nor, with segments of `MIN_SINCE` or more, before an open after a crash would have this much to
 * do: the tail it replays plus `LOAD_SHARE` of the checkpoint it reads (reading a checkpoint cost about
 * half of replaying as many log bytes on the bench machine, its arrays' fresh pages mostly: 48 MB of
 * keyed tail ~310 ms, a 47 MB checkpoint with 350 MB covered ~300 ms, bench/README.md "Session 18").
 * A small window's checkpoint is then written every ~13–19 MB instead of every 4 MiB (each rewrites
 * every acked id of the window), and a large one's as before: `1 / SHARE` of it.
 */
const REPLAY_BUDGET = 20 << 20
const LOAD_SHARE = 2

/**
 * Log bytes after which the next running checkpoint is due, the last one being `lastBytes` long: at
 * least `MIN_SINCE` (or a segment, if smaller) and `1 / SHARE` of the last one (so checkpoints write at
 * most about `SHARE` times the bytes the log writes), and, with segments of `MIN_SINCE` or more, what
 * keeps the tail plus `1 / LOAD_SHARE` of the checkpoint within `REPLAY_BUDGET`. What an open after a
 * crash replays is bounded by this, plus what was written while the newest checkpoint was being written.
 */
export const dueAfter = (lastBytes: number, segmentBytes: number): number =>
  Math.max(
    Math.min(segmentBytes, MIN_SINCE),
    lastBytes / SHARE,
    segmentBytes < MIN_SINCE ? 0 : REPLAY_BUDGET - lastBytes / LOAD_SHARE
  )

/** CRC-32 of bytes [from, to) of `path` carried on from `crc`, read through the thread pool; -1 if the file is shorter. */
const checksumAsync = async (path: string, from: number, to: number, crc: number, buf: Buffer): Promise<number> => {
  const fh = await fs.promises.open(path, "r")
  try {
    // Reads of `CHUNK` bytes keep the position's offset within a page, so the view stays placed for it.
    const view = skewed(buf, from, CHUNK)
    let at = from
    while (at < to) {
      const { bytesRead } = await fh.read(view, 0, Math.min(CHUNK, to - at), at)
      if (bytesRead === 0) return -1
      crc = crc32(view.subarray(0, bytesRead), crc)
      at += bytesRead
    }
    return crc
  } finally {
    await fh.close()
  }
}

export class Checkpointer {
  /** Log bytes written since the state of the last checkpoint was captured. */
  private since: number
  /** Size of the last checkpoint written. */
  private lastBytes = 0
  private running: Promise<void> | undefined
  /** Bumped when files are replaced (a compaction installed a snapshot): a checkpoint captured before is dropped. */
  private epoch = 0
  /** The running checkpoints' read buffer (`CHUNK`). */
  private chunk: Buffer | undefined
  /** The running checkpoints' entries buffer (`KEEP_ROOM_BYTES`); free while none runs. */
  private room: Buffer | undefined

  constructor(
    private readonly dir: string,
    private readonly sync: boolean,
    private readonly segmentBytes: number,
    private readonly addresses: Addresses,
    private readonly segments: ReadonlyMap<number, KeptSegment>,
    /** Bytes open replayed (not covered by a checkpoint): as if written since the last one. */
    replayed: number,
    private readonly step?: (step: CheckpointStep) => void
  ) {
    this.since = replayed
    // The checkpoint open found, if any, stands for the size of the state until this process writes one.
    try {
      this.lastBytes = fs.statSync(join(dir, CHECKPOINT)).size
    } catch {
      // none
    }
  }

  /**
   * The writer wrote `bytes`: start a checkpoint if one is due (`at` captures the log now, `mark`
   * queues its marker). Not while `paused` (a compaction runs).
   */
  written(bytes: number, paused: boolean, at: () => CaptureAt, mark: Mark): void {
    this.since += bytes
    if (paused || this.running !== undefined || this.since < this.due()) return
    const now = at()
    if (now.state.acked.size === 0 || !pays(now.state)) return
    let captured: CapturedCheckpoint
    try {
      captured = capture(this.dir, now, this.room)
    } catch {
      // No checkpoint this time (a full disk, say; the temporary file is gone): the last one still stands,
      // and the next try waits as long as after a checkpoint.
      this.since = 0
      return
    }
    this.open.add(captured)
    // The entries did not fit the room kept: a bigger one for the next checkpoints (room to grow, and for
    // the header framed after the entries), or none past `KEEP_ROOM_BYTES`.
    if (captured.room !== this.room) {
      const size = Math.ceil(captured.entries.length * 1.25) + ROOM_SLACK
      this.room = size <= KEEP_ROOM_BYTES ? Buffer.allocUnsafeSlow(size) : undefined
    }
    this.since = 0
    const epoch = this.epoch
    this.step?.("checkpoint-captured")
    this.running = new Promise<void>((resolve) =>
      mark((e) => resolve(e === undefined ? this.write(captured, now.end, epoch) : this.drop(captured)))
    )
      .catch(() => {
        // No checkpoint this time (a full disk, say): the last one still stands for a prefix of the files.
        this.drop(captured)
      })
      .finally(() => {
        this.running = undefined
      })
  }

  /** Log bytes after which the next running checkpoint is due (`dueAfter`). */
  private due(): number {
    return dueAfter(this.lastBytes, this.segmentBytes)
  }

  /** Files were replaced (a compaction): the checkpoint that covered them is gone; the next write may start one. */
  replaced(): void {
    this.epoch++
    this.since = Number.POSITIVE_INFINITY
  }

  /** Wait for the running checkpoint, if any, to be written (or given up). */
  idle(): Promise<void> {
    return this.running ?? Promise.resolve()
  }

  /**
   * The files a checkpoint at `end` covers: the kept files up to the log segment holding `end`, that
   * one up to `end`. `undefined` if `end` is not in a log segment the log keeps.
   */
  private covering(end: number): Array<{ readonly s: KeptSegment; readonly size: number }> | undefined {
    const place = new Uint32Array(2)
    if (!this.addresses.locate(end, place) || place[0]! >= SNAP_BIT) return undefined
    const last = codeNumber(place[0]!)
    const tip = this.segments.get(last)
    if (tip === undefined || tip.kind !== "log" || place[1]! > tip.bytes) return undefined
    return [...this.segments.values()]
      .filter((s) => s.number <= last)
      .sort((a, b) => a.number - b.number)
      .map((s) => ({ s, size: s.number === last ? place[1]! : s.bytes }))
  }

  /** Give a captured checkpoint up: its file closed (if open) and removed. */
  private drop(c: CapturedCheckpoint): void {
    if (this.open.delete(c)) dropCheckpoint(this.dir, c.fd)
  }

  /** Captured checkpoints whose file is still open. */
  private readonly open = new Set<CapturedCheckpoint>()

  private async write(c: CapturedCheckpoint, end: number, epoch: number): Promise<void> {
    try {
      await this.finish(c, end, epoch)
    } finally {
      this.drop(c)
    }
  }

  /** Name the files `c` covers, write the rest of its file, sync it and rename it over CHECKPOINT (if all still holds). */
  private async finish(c: CapturedCheckpoint, end: number, epoch: number): Promise<void> {
    const files = this.covering(end)
    if (files === undefined) return
    const covered: Array<Covered> = []
    for (const { s, size } of files) {
      if (s.crcTo > size) return
      if (s.crcTo < size) {
        this.chunk ??= Buffer.allocUnsafe(CHUNK + PAGE)
        const path = join(this.dir, segmentName(s.number, s.kind))
        const crc = await checksumAsync(path, s.crcTo, size, s.crc, this.chunk)
        if (crc < 0 || epoch !== this.epoch) return
        // The CRC of a prefix only grows: the close (and the next checkpoint) carry it on from here.
        if (s.crcTo < size) {
          s.crc = crc
          s.crcTo = size
        }
      }
      covered.push({ number: s.number, kind: s.kind, size, crc: s.crc })
    }
    const rest = frameCheckpoint(c, covered, (address, out) => this.addresses.locate(address, out))
    for (let off = 0; off < rest.length;) off += await writeAt(c.fd, rest.subarray(off), c.at + off)
    // A spare written over may have been longer: the file ends where the checkpoint does (its trailer).
    await truncateFd(c.fd, c.at + rest.length)
    if (this.sync) await fsyncFd(c.fd)
    const temp = join(this.dir, `${CHECKPOINT}.tmp`)
    this.open.delete(c)
    try {
      await closeFd(c.fd)
    } catch (e) {
      await fs.promises.rm(temp, { force: true })
      throw e
    }
    this.step?.("checkpoint-temp-written")
    if (epoch !== this.epoch) {
      await fs.promises.rm(temp, { force: true })
      return
    }
    keepSpare(this.dir)
    await fs.promises.rename(temp, join(this.dir, CHECKPOINT))
    this.step?.("checkpoint-renamed")
    if (this.sync) {
      const dh = await fs.promises.open(this.dir, "r")
      try {
        await dh.sync()
      } finally {
        await dh.close()
      }
    }
    this.lastBytes = c.at + rest.length
  }

  /**
   * The checkpoint of a clean close (every record written): the state now and every kept file whole
   * (the bytes not hashed yet are read back for their CRC-32). Written if it pays (a log of mostly
   * pending entries gets none: an older one, if there is one, still stands for the files it covers).
   * Throws the I/O error.
   */
  atClose(state: LogState, nextLsn: number): void {
    if (!pays(state)) return
    const covered: Array<Covered> = []
    const window = new ReadWindow()
    for (const s of [...this.segments.values()].sort((a, b) => a.number - b.number)) {
      if (s.crcTo < s.bytes) {
        const crc = withFile(
          join(this.dir, segmentName(s.number, s.kind)),
          (fd) => checksumFile(fd, s.bytes, s.crcTo, s.crc, window)
        )
        if (crc < 0) return
        s.crc = crc
        s.crcTo = s.bytes
      }
      covered.push({ number: s.number, kind: s.kind, size: s.bytes, crc: s.crc })
    }
    const c = capture(this.dir, { state, nextLsn, end: -1 })
    let rest: Buffer
    try {
      rest = frameCheckpoint(c, covered, (address, out) => this.addresses.locate(address, out))
    } catch (e) {
      dropCheckpoint(this.dir, c.fd)
      throw e
    }
    writeCheckpoint(this.dir, c, rest)
  }
}
