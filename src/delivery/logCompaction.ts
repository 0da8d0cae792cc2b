/**
 * The log core's compaction job: how many bytes the log's files hold, when dead weight calls for a
 * compaction, and running one (checkpoint at a segment boundary, snapshot, install, remove; a retry
 * after a failed snapshot rebuilds the same checkpoint from disk). The steps themselves, and what a
 * crash at each leaves, are in compaction.ts and docs/delivery-log-format.md ("Compaction").
 */
import * as fs from "node:fs"
import { join } from "node:path"
import { type Captured, type CompactionHooks, removeReplaced, writeSnapshot } from "./compaction.js"
import { DeliveryLogError } from "./errors.js"
import type { Checkpoint } from "./groupCommit.js"
import type { KeyedPlaces } from "./keyedPlaces.js"
import { CorruptLog, type KeptSegment, recover } from "./recovery.js"
import { segmentName } from "./segment.js"
import type { LogState } from "./state.js"
import type { ResolvedOptions } from "./validate.js"

/** What compaction needs of the core it runs in. */
export interface CompactionHost {
  readonly o: ResolvedOptions
  readonly hooks: CompactionHooks
  readonly state: LogState
  /** The files of the log (compaction replaces some with its snapshot). */
  readonly segments: Map<number, KeptSegment>
  readonly places: KeyedPlaces
  /** Slack over `maxRecordBytes` allowed when reading. */
  readonly readSlack: number
  /** Why the core takes no calls now, if it does not. */
  readonly refuse: () => DeliveryLogError | undefined
  /** The writer's checkpoint: `capture` runs at a record boundary that ends a sealed segment. */
  readonly checkpoint: (capture: () => Captured) => Promise<Checkpoint<Captured>>
  /** The latest time a call brought (the dedupe window is evicted by it). */
  readonly now: () => number
  readonly nextLsn: () => number
  /** Write the MANIFEST (it names `installing`). Throws the I/O error. */
  readonly saveManifest: () => void
  /** Resolves once no CHECKPOINT is being written (one covers files a compaction replaces). */
  readonly checkpointsIdle: () => Promise<void>
  /** The snapshot is named and the window points into it: a CHECKPOINT naming the replaced files is void. */
  readonly replaced: () => void
}

export class LogCompaction {
  private chain: Promise<void> = Promise.resolve()
  private running = false
  /** Bytes of every file of the log. */
  private total = 0
  /** Size of the newest snapshot: the log must grow past it (and past a segment) before compacting again. */
  private baseline = 0
  /**
   * A checkpoint whose snapshot failed: segments below `reserved` are sealed and that number is free.
   * The next try rebuilds the same checkpoint from those files instead of sealing another segment.
   */
  private retry: { readonly reserved: number } | undefined
  /** A snapshot being installed (named in the MANIFEST before its rename). */
  installing: number | null = null

  constructor(private readonly host: CompactionHost) {
    for (const s of host.segments.values()) {
      this.total += s.bytes
      if (s.kind === "snap") this.baseline = s.bytes
    }
  }

  /** A compaction is running. */
  get compacting(): boolean {
    return this.running
  }

  /** Bytes of every file of the log. */
  get bytes(): number {
    return this.total
  }

  /** A compaction and every one queued before it are done (or failed). */
  get settled(): Promise<void> {
    return this.chain
  }

  /**
   * `bytes` were appended to the log: should a compaction run? Dead weight is an estimate (live bytes
   * are counted by append size); requiring the log to have grown by the last snapshot's size as well
   * makes compaction amortised even when it is off.
   */
  written(bytes: number): boolean {
    this.total += bytes
    const grown = this.total - this.baseline
    const deadWeight = this.total - this.host.state.liveBytes
    const segmentBytes = this.host.o.segmentBytes
    return !this.running &&
      this.host.segments.size >= 2 &&
      grown >= segmentBytes &&
      grown >= this.baseline &&
      deadWeight >= segmentBytes &&
      deadWeight > this.host.state.liveBytes
  }

  /** Run one compaction after any running one. Rejects with `DeliveryLogError`. */
  compact(): Promise<void> {
    const run = this.chain.then(() => this.once())
    this.chain = run.catch(() => undefined)
    return run
  }

  /** The state at the end of the sealed files below `reserved`, read back from disk. */
  private rebuild(reserved: number): Captured {
    const { o, hooks } = this.host
    const r = recover(o.dir, o.maxRecordBytes + this.host.readSlack, reserved, hooks.digest)
    r.state.evict(this.host.now(), o.dedupeWindowMs)
    return {
      entries: r.state.live.list(),
      acked: r.state.acked.copy(),
      nextSeq: r.state.nextSeq,
      nextLsn: r.nextLsn
    }
  }

  private async once(): Promise<void> {
    const host = this.host
    const { o, hooks, state, segments } = host
    const no = host.refuse()
    if (no) throw no
    this.running = true
    let reserved = -1
    // The capture froze the live entries (`freeze` pins the texts' arena until they are written).
    let frozen = false
    try {
      await host.checkpointsIdle()
      const cp = this.retry !== undefined
        ? { reserved: this.retry.reserved, captured: this.rebuild(this.retry.reserved) }
        : await host.checkpoint((): Captured => {
          state.evict(host.now(), o.dedupeWindowMs)
          frozen = true
          return {
            entries: state.live.freeze(),
            acked: state.acked.copy(),
            nextSeq: state.nextSeq,
            nextLsn: host.nextLsn()
          }
        })
      reserved = cp.reserved
      this.retry = { reserved }
      hooks.step?.("checkpointed")
      const snap = await writeSnapshot(o, host.readSlack, cp.reserved, cp.captured, hooks, () => {
        this.installing = cp.reserved
        host.saveManifest()
      })
      const size = snap.size
      const gone = [...segments.values()].filter((s) => s.number < cp.reserved)
      host.places.installed(state, cp.reserved, cp.captured, snap, gone)
      host.replaced()
      const replaced: Array<string> = []
      for (const s of gone) {
        replaced.push(segmentName(s.number, s.kind))
        segments.delete(s.number)
        this.total -= s.bytes
      }
      segments.set(cp.reserved, { number: cp.reserved, kind: "snap", bytes: size, crc: snap.crc, crcTo: size })
      this.total += size
      this.baseline = size
      this.retry = undefined
      this.installing = null
      host.saveManifest()
      removeReplaced(o.dir, replaced, o.sync, hooks)
    } catch (e) {
      if (reserved >= 0) {
        try {
          fs.rmSync(join(o.dir, `${segmentName(reserved, "snap")}.tmp`), { force: true })
        } catch {
          // Left for recovery (it deletes `.snap.tmp` files) or the next try (it truncates it).
        }
      }
      if (e instanceof CorruptLog) {
        this.retry = undefined
        throw new DeliveryLogError({
          reason: "corrupt",
          message: `Compaction found the log corrupt: ${e.message}`,
          path: e.path
        })
      }
      if (e instanceof DeliveryLogError) throw e
      throw new DeliveryLogError({
        reason: "io",
        message: `Compaction failed (${
          (e as NodeJS.ErrnoException)?.code ?? String(e)
        }); the log keeps its segments as they were and goes on`,
        path: o.dir
      })
    } finally {
      if (frozen) state.texts.unpin()
      this.running = false
    }
  }
}
