/**
 * effect/cluster's message storage of one runner: `SqlMessageStorage`'s own SQL driver
 * (`makeEncodedStorage`) under `MessageStorage.makeEncoded`, as `SqlMessageStorage.layerStorage` builds
 * it, with two additions at the driver's boundary (docs/cluster.md "What a message costs").
 *
 * - **Saved.** A dispatch must return once its `Run` is saved, and its future waits for the run's reply.
 *   With effect/cluster alone that takes two sends of the message: one with `discard` (it returns once the
 *   message is saved) and one to wait for the reply (deduplicated by primary key, then answered by
 *   polling the reply table). Here the dispatcher sends once, without `discard`, so the reply comes back
 *   the direct way (a local reply handler, or the key's runner over its socket), and awaits
 *   {@link Saved}`.await` for the run's primary key, which the driver's `saveEnvelope` completes once
 *   the message is in `cluster_messages` (saved now, or found saved before).
 * - **Reply commits.** A turn's writes (its reply in the outbox, the transcript, the turn record) and the
 *   run's reply (`cluster_replies`, the message marked processed) are one statement, guarded by the
 *   shard's fencing epoch: the turn hands its writes to the runner (`ClusterTask.commitWithReply`), the
 *   runner attaches them to the run's request id ({@link ReplyCommits}), and the driver's `saveReply`
 *   runs them with the reply's rows ({@link replyWrites}) instead of effect/cluster's two statements. A
 *   guard that fails (another runner took the shard) writes nothing, and the save fails the way
 *   effect/cluster fails the reply of a runner that lost its shard (`EntityNotAssignedToRunner`: the
 *   request is left to the shard's owner). So a turn's effects and its run's answer commit together or
 *   not at all: a run whose turn committed is never run again.
 */
import { Context, Deferred, Effect, Layer } from "effect"
import { MessageStorage, Snowflake, SqlMessageStorage } from "effect/cluster"
import { EntityNotAssignedToRunner } from "effect/cluster/ClusterError"
import { PersistenceError } from "effect/cluster/ClusterError"
import type { EntityAddress } from "effect/cluster/EntityAddress"
import * as Timing from "./Timing.js"

/** Who waits for which persisted request to be durable. */
export interface SavedShape {
  /**
   * A wait for the request with this storage primary key (`<entityType>/<entityId>/<tag>/<id>`) to be
   * saved; call it before sending. `release` forgets the wait (call it once the send ended either way).
   */
  readonly await: (primaryKey: string) => { readonly saved: Effect.Effect<void>; readonly release: () => void }
}

export class Saved extends Context.Service<Saved, SavedShape>()("switchyard/cluster/Saved") {}

/** The storage primary key of a request, as effect/cluster composes it (`Envelope.primaryKeyByAddress`). */
export const primaryKeyOf = (entityType: string, entityId: string, tag: string, id: string): string =>
  `${entityType}/${entityId}/${tag}/${id}`

/** The rows of a run's reply, as effect/cluster's driver writes them (ids are snowflakes, as text). */
export interface ReplyRow {
  readonly requestId: string
  readonly replyId: string
  /** The reply's exit, encoded (JSON). */
  readonly payload: string
}

/**
 * Writes the turn's effects together with `reply` in one statement (see {@link replyWrites}); returns
 * false when its guard refused (nothing written).
 */
export type ReplyCommit = (reply: ReplyRow) => Effect.Effect<boolean, unknown>

/** Commits attached to requests whose reply the runner is about to save. */
export interface ReplyCommitsShape {
  /** Attach `commit` to the reply of request `requestId` (of the entity at `address`); `onTaken` runs once it was used. */
  readonly attach: (
    requestId: string,
    attachment: { readonly commit: ReplyCommit; readonly address: EntityAddress; readonly onTaken: () => void }
  ) => void
  /** Forget the commit of `requestId` (its reply will not be saved here); true when it was still attached. */
  readonly detach: (requestId: string) => boolean
}

export class ReplyCommits extends Context.Service<ReplyCommits, ReplyCommitsShape>()(
  "switchyard/cluster/ReplyCommits"
) {}

/**
 * The statements that write a run's reply the way effect/cluster's SQL driver does (`saveReply` of a
 * `WithExit`: the request's rows marked processed with the reply's id, the reply row), as CTE bodies
 * for `PgDeliveryLog.appendGuarded`'s `also` (they write only when its `locked` has a row). Parameters
 * `$<first>` = reply id, `$<first+1>` = request id, `$<first+2>` = payload.
 */
export const replyWrites = (first: number, prefix = "cluster"): ReadonlyArray<string> => [
  `UPDATE "${prefix}_messages" SET processed = TRUE, last_reply_id = $${first}::bigint
   FROM locked WHERE request_id = $${first + 1}::bigint`,
  `INSERT INTO "${prefix}_replies" (id, kind, request_id, payload, sequence)
   SELECT $${first}::bigint, 0, $${first + 1}::bigint, $${first + 2}::text, NULL FROM locked`
]

/** The parameters of {@link replyWrites}, in order. */
export const replyParams = (reply: ReplyRow): ReadonlyArray<unknown> => [reply.replyId, reply.requestId, reply.payload]

/** The run id of a `Run`'s primary key (`.../Run/<runId>`), for Timing.ts. */
const runIdOfKey = (primaryKey: string | null): string =>
  primaryKey === null ? "-" : primaryKey.slice(primaryKey.indexOf("/Run/") + 5)

/** `save(options)`, its start and end marked for the run (Timing.ts) when timing is on. */
const timedSave = <A, E>(
  save: (options: Parameters<MessageStorage.Encoded["saveEnvelope"]>[0]) => Effect.Effect<A, E>,
  options: Parameters<MessageStorage.Encoded["saveEnvelope"]>[0]
): Effect.Effect<A, E> => {
  if (!Timing.enabled) return save(options)
  return Effect.suspend(() => {
    const runId = runIdOfKey(options.primaryKey)
    Timing.mark(runId, "save0")
    return Effect.tap(save(options), () => Effect.sync(() => Timing.mark(runId, "save1")))
  })
}

/**
 * `MessageStorage` on `SqlMessageStorage`'s driver (tables `cluster_*`, created beforehand by
 * `Migrations.migrate`), plus {@link Saved} and {@link ReplyCommits}.
 */
export const layer = Layer.effectContext(Effect.gen(function*() {
  const encoded = yield* SqlMessageStorage.makeEncodedStorage({})
  const waits = new Map<string, Set<Deferred.Deferred<void>>>()
  const attached = new Map<
    string,
    { readonly commit: ReplyCommit; readonly address: EntityAddress; readonly onTaken: () => void }
  >()
  const saved: SavedShape = {
    await: (primaryKey) => {
      const deferred = Deferred.makeUnsafe<void>()
      let set = waits.get(primaryKey)
      if (set === undefined) {
        set = new Set()
        waits.set(primaryKey, set)
      }
      set.add(deferred)
      return {
        saved: Deferred.await(deferred),
        release: () => {
          const s = waits.get(primaryKey)
          if (s === undefined) return
          s.delete(deferred)
          if (s.size === 0) waits.delete(primaryKey)
        }
      }
    }
  }
  const commits: ReplyCommitsShape = {
    // An attachment leaves when its reply is saved, or when its entity stops (KeyRunner detaches what
    // it attached): at most the replies in flight are held. Never dropped otherwise: a reply saved
    // without its commit would answer a turn whose writes never happened.
    attach: (requestId, attachment) => {
      attached.set(requestId, attachment)
    },
    detach: (requestId) => attached.delete(requestId)
  }
  const driver: MessageStorage.Encoded = {
    ...encoded,
    ...(Timing.enabled ?
      {
        // The read of the messages a runner was notified of, timed for each run it returns (Timing.ts).
        unprocessedMessages: (shards, now, options) =>
          Effect.suspend(() => {
            const t0 = Timing.now()
            return Effect.tap(encoded.unprocessedMessages(shards, now, options), (messages) =>
              Effect.sync(() => {
                for (const m of messages) {
                  const runId = (m.envelope as { payload?: { runId?: unknown } }).payload?.runId
                  if (typeof runId !== "string") continue
                  Timing.mark(runId, "read0", t0)
                  Timing.mark(runId, "read1")
                }
              }))
          })
      } :
      {}),
    saveEnvelope: (options) =>
      Effect.tap(timedSave(encoded.saveEnvelope, options), () =>
        Effect.sync(() => {
          const set = options.primaryKey === null ? undefined : waits.get(options.primaryKey)
          if (set === undefined) return
          waits.delete(options.primaryKey!)
          for (const d of set) Deferred.doneUnsafe(d, Effect.void)
        })),
    saveReply: (reply) => {
      const attachment = reply._tag === "WithExit" ? attached.get(reply.requestId) : undefined
      if (attachment === undefined || reply._tag !== "WithExit") return encoded.saveReply(reply)
      return attachment.commit({ requestId: reply.requestId, replyId: reply.id, payload: JSON.stringify(reply.exit) })
        .pipe(
          Effect.mapError((cause) => new PersistenceError({ cause })),
          Effect.flatMap((written) => {
            if (!written) {
              // Another runner holds the shard now: leave the request to it, as effect/cluster does when
              // its own lock check fails before a reply (the entity manager abandons the request on this).
              return Effect.fail(new EntityNotAssignedToRunner({ address: attachment.address }) as never)
            }
            if (attached.get(reply.requestId) === attachment) attached.delete(reply.requestId)
            attachment.onTaken()
            return Effect.void
          })
        )
    }
  }
  const storage = yield* MessageStorage.makeEncoded(driver)
  return Context.make(MessageStorage.MessageStorage, storage).pipe(
    Context.add(Saved, saved),
    Context.add(ReplyCommits, commits)
  )
})).pipe(Layer.provide(Snowflake.layerGenerator))
