/** The log is damaged at `path`, `offset`: open must refuse and change nothing. */
export class CorruptLog extends Error {
  constructor(
    readonly path: string,
    readonly offset: number,
    detail: string
  ) {
    super(`${detail} in ${path} at offset ${offset}`)
  }
}
