/**
 * Framing records straight into the group-commit writer's staging buffer (no `Buffer` per record):
 * the size is known first, checked against `maxRecordBytes`, then the payload is written in place
 * and the header and CRC-32 sealed. Nothing is staged for a record that is refused.
 */
import { DeliveryLogError } from "./errors.js"
import type { GroupCommitWriter } from "./groupCommit.js"
import { idRecordBytes, utf8Bytes, writeId } from "./payload.js"
import { HEADER_BYTES, type Kind, seal } from "./record.js"

/** `too-large` (nothing written) for a record whose payload would take it over `maxRecordBytes`. */
export const tooLarge = (maxRecordBytes: number, payloadBytes: number, what: string): DeliveryLogError | undefined => {
  if (HEADER_BYTES + payloadBytes <= maxRecordBytes) return undefined
  return new DeliveryLogError({
    reason: "too-large",
    message: `Expected ${what} to encode to at most \`maxRecordBytes\` = ${maxRecordBytes} bytes, got ${
      HEADER_BYTES + payloadBytes
    }; make it smaller or open the log with a larger \`maxRecordBytes\``
  })
}

/**
 * Frame a record of `payloadBytes` as number `lsn` at the end of the writer's staging buffer: `fill`
 * writes the payload at the offset given, then the header and CRC are sealed. If `fill` throws, the
 * room is given back (nothing is written) and the error is returned. The caller then `push`es it.
 */
export const stageRecord = (
  writer: GroupCommitWriter,
  lsn: number,
  kind: Kind,
  payloadBytes: number,
  fill: (buf: Buffer, at: number) => void
): DeliveryLogError | undefined => {
  const at = writer.reserve(HEADER_BYTES + payloadBytes)
  const buf = writer.buffer
  try {
    fill(buf, at + HEADER_BYTES)
  } catch (e) {
    writer.cancel(at)
    return new DeliveryLogError({ reason: "invalid", message: `Could not encode the record (${String(e)})` })
  }
  seal(buf, at, lsn, kind, payloadBytes)
  return undefined
}

/**
 * Stage an id-keyed record (attempt, ack, dead, requeue): the id, `fixed` bytes written by `fill` at
 * the offset after the id, then `text`. Returns why it is refused, if it is (then nothing is staged).
 */
export const stageIdRecord = (
  writer: GroupCommitWriter,
  maxRecordBytes: number,
  lsn: number,
  kind: Kind,
  id: string,
  fixed: number,
  text: string | undefined,
  what: string,
  fill?: (buf: Buffer, at: number) => void
): DeliveryLogError | undefined => {
  const idBytes = utf8Bytes(id)
  const textBytes = text === undefined ? 0 : utf8Bytes(text)
  const payloadBytes = idRecordBytes(idBytes, fixed, textBytes)
  const big = tooLarge(maxRecordBytes, payloadBytes, what)
  if (big) return big
  return stageRecord(writer, lsn, kind, payloadBytes, (buf, start) => {
    const at = writeId(buf, start, id, idBytes)
    fill?.(buf, at)
    if (text !== undefined) buf.write(text, at + fixed, textBytes, "utf8")
  })
}
