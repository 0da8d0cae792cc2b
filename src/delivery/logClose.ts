/** The last steps of closing the log core's files: the cut after a failed write, and the CHECKPOINT at close. */
import * as fs from "node:fs"
import { join } from "node:path"
import { CHECKPOINT } from "./checkpoint.js"
import type { Frontier } from "./groupCommit.js"
import { segmentName } from "./segment.js"

/**
 * After a failed write: cut the bytes of the segment being written past the durable `frontier` (a
 * failed batch, never reported durable), so that a re-open shows exactly what was acknowledged.
 */
export const cutToFrontier = (dir: string, f: Frontier, sync: boolean): void => {
  const path = join(dir, segmentName(f.number, "log"))
  try {
    if (fs.statSync(path).size <= f.size) return
    const fd = fs.openSync(path, "r+")
    try {
      fs.ftruncateSync(fd, f.size)
      if (sync) fs.fsyncSync(fd)
    } finally {
      fs.closeSync(fd)
    }
  } catch {
    // Recovery on the re-open judges what is there (a torn tail it cuts itself).
  }
}

/** Write the CHECKPOINT at close with `write`; if that throws, none (and no `CHECKPOINT.tmp` left if it can be helped). */
export const checkpointAtClose = (dir: string, write: () => void): void => {
  try {
    write()
  } catch {
    // No checkpoint (a full disk, say): the next open replays the records instead.
    try {
      fs.rmSync(join(dir, `${CHECKPOINT}.tmp`), { force: true })
    } catch {
      // left for the next open, which deletes it
    }
  }
}
