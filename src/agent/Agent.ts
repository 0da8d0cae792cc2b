/**
 * The agent runtime: user turns on lane `main` keyed by session, a heartbeat on lane `heartbeat`,
 * cron jobs on lane `cron`, every reply written to the delivery log before a channel sees it.
 *
 * A user message is journaled in its session's transcript file (accepted) before `send` returns;
 * a turn answers every accepted, unanswered message of its session at the moment it starts, so
 * messages that arrive while a turn runs are answered together by the next one. What a crash
 * interrupts is finished on the next start: accepted messages are answered, a reply recorded and
 * not yet in the log is appended (once: its idempotency key is the session and turn number).
 */
import { Deferred, Effect, Exit, Fiber, Scope } from "effect"
import * as path from "node:path"
import { DeliveryLog, DeliveryQueue } from "../delivery/index.js"
import type { DeliveryEntry, DeliveryFailure, DeliveryLogError } from "../delivery/index.js"
import { CommandQueue } from "../queue/index.js"
import type { LanesConfigInvalid, RequestError } from "../queue/index.js"
import { cronSession, parseJobs, runSchedule } from "./CronJobs.js"
import type { AgentConfigInvalid } from "./errors.js"
import type { AgentEvent, TurnResult } from "./events.js"
import { HEARTBEAT_SESSION, heartbeatPrompt, runHeartbeat } from "./Heartbeat.js"
import { watchLogHealth } from "./logHealth.js"
import { Model } from "./Model.js"
import { validateOptions } from "./options.js"
import { DEFAULT_MAX_RECORD_BYTES } from "./replies.js"
import type { UnansweredSession } from "./retries.js"
import { ensureStateDir } from "./stateDir.js"
import * as Transcripts from "./Transcripts.js"
import { makeTurns } from "./turns.js"
import { DEFAULT_TURN_TIMEOUT_MS, withTurnTimeouts } from "./turnTimeouts.js"
import type { AgentOptions, AgentSnapshot, SendError, ShutdownReport, TurnError } from "./types.js"

export type { AgentEvent, TurnResult } from "./events.js"
export type { LogHealthStatus } from "./logHealth.js"
export type { TurnFailure, UnansweredSession } from "./retries.js"
export { RETRY_DELAYS_MS } from "./retries.js"
export { DEFAULT_TURN_TIMEOUT_MS } from "./turnTimeouts.js"
export type { AgentOptions, AgentSnapshot, SendError, ShutdownReport, TurnError } from "./types.js"

/** A running agent. */
export interface Agent {
  /**
   * Accepts a user message of `session` (it is on disk when this returns) and returns the future
   * of the turn that will answer it. Messages that arrive while a turn of the session runs are
   * answered together by the next turn. Fails with `AdmissionError` when the agent is shutting
   * down or lane `main` is full (the message is then not kept).
   */
  readonly send: (
    session: string,
    text: string
  ) => Effect.Effect<CommandQueue.Future<TurnResult, TurnError>, SendError>
  /**
   * `send` for several messages of one session at once (e.g. lines that arrived together): one
   * write accepts them all, and one turn answers them (with whatever else it finds accepted).
   */
  readonly sendAll: (
    session: string,
    texts: ReadonlyArray<string>
  ) => Effect.Effect<CommandQueue.Future<TurnResult, TurnError>, SendError>
  /**
   * Restarts a lane of the queue (see `CommandQueue.restartLane`): every older task fails `stale`.
   * For `main`, the accepted messages of the interrupted turns stay accepted, and each of their
   * sessions gets a fresh turn at once.
   */
  readonly restartLane: (lane: string) => Effect.Effect<number, RequestError>
  /**
   * Pauses a lane (see `CommandQueue.pause`): its running turns go on, nothing more starts, and
   * messages are still accepted (a paused `main` answers them once resumed). `snapshot` shows the
   * lane `paused`. Not kept across a restart. `RequestError` for an unknown lane.
   */
  readonly pauseLane: (lane: string) => Effect.Effect<void, RequestError>
  /** Resumes a paused lane (see `CommandQueue.resume`): what waits starts at once, longest waiter first. */
  readonly resumeLane: (lane: string) => Effect.Effect<void, RequestError>
  /**
   * Changes a lane's limits while the agent runs (see `CommandQueue.setLimits`): a larger
   * `concurrent` starts waiting turns at once, a smaller one lets running turns finish. Not kept
   * across a restart (the `lanes` option is). `RequestError` naming the `field` for a bad value.
   */
  readonly setLaneLimits: (
    lane: string,
    limits: Partial<CommandQueue.LaneLimits>
  ) => Effect.Effect<void, RequestError>
  readonly snapshot: Effect.Effect<AgentSnapshot>
  /** Sessions with messages accepted and not answered, and their failures (as in `snapshot`). */
  readonly unanswered: Effect.Effect<ReadonlyArray<UnansweredSession>>
  /**
   * Retries now, skipping the backoff: every session whose turns fail (or only `session`), also
   * those that wait after a `retryable: false` error. Returns how many sessions got a turn.
   */
  readonly retry: (session?: string) => Effect.Effect<number>
  /**
   * Stops the heartbeat and cron, drains the lanes (turns in flight finish, up to `drainTimeoutMs`),
   * waits for deliveries in flight (same bound), flushes the log. Idempotent: a second call waits
   * for the first and returns the same report.
   */
  readonly shutdown: Effect.Effect<ShutdownReport>
  /** The session of the last user message (or `defaultSession`). */
  readonly lastActiveSession: () => string
  readonly queue: CommandQueue.CommandQueue
  readonly deliveries: DeliveryQueue.DeliveryQueue
  readonly log: DeliveryLog.DeliveryLog
  readonly transcripts: Transcripts.Transcripts
}

/** The system prompt when none is given. */
export const DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant in a chat. Answer briefly and plainly."

/**
 * Builds an agent in the current Scope: the delivery log in `stateDir` (unless `log` is given),
 * the delivery queue over `channel`, the command queue, the transcripts; finishes what a crash
 * left (accepted messages, replies not yet logged); then starts the heartbeat and cron. Closing the
 * Scope shuts the agent down as `shutdown` does, then releases everything.
 */
export const make = (
  options: AgentOptions
): Effect.Effect<
  Agent,
  AgentConfigInvalid | LanesConfigInvalid | DeliveryLogError | Transcripts.TranscriptError,
  Model | Scope.Scope
> =>
  Effect.gen(function*() {
    yield* validateOptions(options)
    const jobs = yield* parseJobs(options.cron ?? [])
    const model = yield* Model
    const stateDir = path.resolve(options.stateDir)
    const fsyncAll = (options.fsync ?? "always") === "always"
    const emit = (event: AgentEvent) => {
      if (options.onEvent === undefined) return
      try {
        options.onEvent(event)
      } catch {
        // an observer's bug must not break a turn
      }
    }

    yield* ensureStateDir(stateDir)
    const maxRecordBytes = options.maxRecordBytes ?? DEFAULT_MAX_RECORD_BYTES
    const log = options.log ??
      (yield* DeliveryLog.open({
        dir: path.join(stateDir, "deliveries"),
        fsync: fsyncAll ? "always" : "never",
        maxRecordBytes
      }))
    const transcripts = yield* Transcripts.make({
      dir: path.join(stateDir, "sessions"),
      historyLimit: options.historyLimit ?? 20,
      fsync: fsyncAll
    })
    const channel = options.channel
    const deliver = (entry: DeliveryEntry): Effect.Effect<void, DeliveryFailure> =>
      channel.send(entry).pipe(
        Effect.tap(() => Effect.sync(() => emit({ type: "delivered", entry }))),
        Effect.tapError((failure) =>
          Effect.sync(() => emit({ type: "delivery-failed", entry, error: failure.message }))
        )
      )
    const deliveries = yield* DeliveryQueue.make({ ...options.delivery, log, deliver })
    const drainTimeoutMs = options.drainTimeoutMs ?? 30_000
    const queue = yield* CommandQueue.make({
      lanes: withTurnTimeouts(options.lanes, options.turnTimeoutMs ?? DEFAULT_TURN_TIMEOUT_MS),
      drainTimeoutMs
    })

    // Retry timers and the health watch: closed by the shutdown, before the queue.
    const timers = yield* Scope.make()
    yield* Effect.addFinalizer(() => Scope.close(timers, Exit.void))
    const health = watchLogHealth(log, {
      emit,
      // Healthy again: what failed on the log or the disk is retried at once, without a restart.
      healed: Effect.suspend(() => (turns.anyIoFailure()
        ? Effect.asVoid(turns.retry(undefined, (io) => io))
        : Effect.void)
      ),
      waiting: () => turns.anyIoFailure()
    })
    const turns = makeTurns({
      scope: timers,
      onIoFailure: health.poke,
      maxRecordBytes,
      ...(options.maxMessagesPerTurn === undefined ? {} : { maxMessagesPerTurn: options.maxMessagesPerTurn }),
      model,
      queue,
      deliveries,
      transcripts,
      channelName: channel.name,
      system: options.system ?? DEFAULT_SYSTEM_PROMPT,
      maxTokens: options.maxTokens ?? 1024,
      defaultSession: options.defaultSession ?? "local",
      emit
    })

    yield* turns.recover

    const background: Array<Fiber.Fiber<unknown, unknown>> = []
    background.push(yield* Effect.forkIn(health.watch, timers))
    const tickFailed = (what: string) => (error: unknown) =>
      Effect.logDebug(
        `switchyard: ${what} tick not admitted: ${String((error as { message?: unknown })?.message ?? error)}`
      )
    if (options.heartbeat !== undefined) {
      const prompt = heartbeatPrompt(options.heartbeat)
      const tick = queue.dispatch("heartbeat", HEARTBEAT_SESSION, turns.heartbeatTurn(prompt), { coalesce: true }).pipe(
        Effect.asVoid,
        Effect.catch(tickFailed("heartbeat"))
      )
      background.push(yield* Effect.forkScoped(runHeartbeat(options.heartbeat.everyMs, tick)))
    }
    for (const job of jobs) {
      const tick = queue.dispatch("cron", job.name, turns.cronTurn(job), { coalesce: true }).pipe(
        Effect.asVoid,
        Effect.catch(tickFailed(`cron job \`${job.name}\``))
      )
      background.push(yield* Effect.forkScoped(runSchedule(job.cron, tick)))
    }

    let shutdownDone: Deferred.Deferred<ShutdownReport> | undefined
    const shutdownOnce = Effect.gen(function*() {
      yield* turns.close
      yield* Effect.forEach(background, Fiber.interrupt, { discard: true })
      // A paused lane stays paused: what waits there would only hold the drain to its deadline.
      // Its turns are dropped now (a user message stays accepted and is answered on the next start).
      for (const lane of yield* queue.snapshot) {
        if (lane.paused && lane.waiting > 0) yield* Effect.ignore(queue.clear(lane.lane))
      }
      const drain = yield* queue.drain({ timeoutMs: drainTimeoutMs })
      yield* Effect.timeoutOption(deliveries.idle, drainTimeoutMs)
      yield* log.flush.pipe(
        Effect.catch((error) => Effect.logWarning(`switchyard: flushing the delivery log failed: ${error.message}`))
      )
      const stats = yield* deliveries.stats
      const unanswered = turns.unanswered().reduce((n, s) => n + s.messages, 0)
      return { drain, pendingDeliveries: stats.pending, unanswered } satisfies ShutdownReport
    })
    const shutdown: Effect.Effect<ShutdownReport> = Effect.suspend(() => {
      if (shutdownDone !== undefined) return Deferred.await(shutdownDone)
      const done = (shutdownDone = Deferred.makeUnsafe<ShutdownReport>())
      return Effect.uninterruptible(Effect.onExit(shutdownOnce, (exit) => Deferred.done(done, exit)))
    })
    // Closing the Scope shuts down first (finalizers run in reverse: this one before the queue's).
    yield* Effect.addFinalizer(() => Effect.asVoid(shutdown))

    const agent: Agent = {
      send: turns.send,
      sendAll: turns.sendAll,
      restartLane: (lane) =>
        Effect.gen(function*() {
          const sessions = lane === "main" ? turns.sessionsOwed() : []
          const generation = yield* queue.restartLane(lane)
          yield* turns.resume(sessions)
          return generation
        }),
      pauseLane: (lane) => queue.pause(lane),
      resumeLane: (lane) => queue.resume(lane),
      setLaneLimits: (lane, limits) => queue.setLimits(lane, limits),
      snapshot: Effect.gen(function*() {
        const lanes = yield* queue.snapshot
        const stats = yield* deliveries.stats
        const logHealth = yield* health.status
        return {
          lanes,
          deliveries: stats,
          lastActiveSession: turns.lastActiveSession(),
          unanswered: turns.unanswered(),
          log: logHealth
        }
      }),
      unanswered: Effect.sync(turns.unanswered),
      retry: (session) => turns.retry(session),
      shutdown,
      lastActiveSession: turns.lastActiveSession,
      queue,
      deliveries,
      log,
      transcripts
    }
    return agent
  })

export type { CronJob } from "./CronJobs.js"
export type { HeartbeatOptions } from "./Heartbeat.js"
export { cronSession }
