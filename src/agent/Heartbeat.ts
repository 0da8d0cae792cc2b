/** The heartbeat loop: a tick every `everyMs` on the Effect `Clock`, first one `everyMs` after the start. */
import * as Effect from "effect/Effect" // not the index: see CronJobs.ts
import { DEFAULT_HEARTBEAT_PROMPT, HEARTBEAT_OK } from "./Model.js"

/** Heartbeat options of an agent. */
export interface HeartbeatOptions {
  /** The period in milliseconds, finite and > 0. */
  readonly everyMs: number
  /** The prompt of a heartbeat turn (default `DEFAULT_HEARTBEAT_PROMPT`). */
  readonly prompt?: string
}

/** The session a heartbeat turn uses. */
export const HEARTBEAT_SESSION = "heartbeat"

/** The prompt of the heartbeat turns for these options. */
export const heartbeatPrompt = (options: HeartbeatOptions): string => options.prompt ?? DEFAULT_HEARTBEAT_PROMPT

/** Whether a heartbeat reply means "nothing to report" (exactly `HEARTBEAT_OK`, surrounding whitespace aside). */
export const isHeartbeatOk = (text: string): boolean => text.trim() === HEARTBEAT_OK

/** Runs `tick` every `everyMs`, forever. `tick` is expected to return at once (it dispatches). */
export const runHeartbeat = <E, R>(everyMs: number, tick: Effect.Effect<void, E, R>): Effect.Effect<never, E, R> =>
  Effect.forever(Effect.andThen(Effect.sleep(everyMs), tick))
