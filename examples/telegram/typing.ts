/**
 * "typing…" in a chat while its turn runs: `sendChatAction` `typing` when a user turn starts and
 * every 4 s after (Telegram shows it for 5 s, or until the bot's next message arrives), until the
 * turn ends or fails. Without it a chat sees nothing while Claude thinks, or while the SDK waits out
 * a 429's `retry-after`. Best effort: a failed call is not retried and not reported (the reply is
 * what matters, and its own failures are), it never delays a turn, and it stops by itself after
 * `maxMs` should no end of the turn come.
 */
import { Effect, FiberMap } from "effect"
import type { Scope } from "effect"
import type { AgentEvent } from "../../src/agent/index.js"

/** How often the action is sent again while the turn runs (Telegram shows it for 5 s). */
export const TYPING_EVERY_MS = 4_000

export interface Typing {
  /** Pass every agent event: a user turn's start starts the action in its chat, its end stops it. */
  readonly onEvent: (event: AgentEvent) => void
}

/**
 * The chat action loop per chat, run in the Scope (closing it stops every one). `send` calls
 * `sendChatAction` for a chat (its failure is ignored).
 */
export const makeTyping = (options: {
  readonly send: (chat: string) => Effect.Effect<unknown, unknown>
  /** Stops by itself after this long (the turn's own timeout). */
  readonly maxMs: number
}): Effect.Effect<Typing, never, Scope.Scope> =>
  Effect.gen(function*() {
    const fibers = yield* FiberMap.make<string>()
    const run = yield* FiberMap.runtime(fibers)()
    const typing = (chat: string) =>
      Effect.ignore(options.send(chat)).pipe(
        Effect.andThen(Effect.sleep(TYPING_EVERY_MS)),
        Effect.forever,
        Effect.timeoutOrElse({ duration: options.maxMs, orElse: () => Effect.void })
      )
    return {
      onEvent: (event) => {
        if (event.type === "turn-started" && event.kind === "user") run(event.session, typing(event.session))
        else if ((event.type === "turn-ended" || event.type === "turn-failed") && event.kind === "user") {
          // replacing the chat's fiber interrupts it
          run(event.session, Effect.void)
        }
      }
    }
  })
