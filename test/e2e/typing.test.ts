/** The Telegram bot's "typing…" (examples/telegram/typing.ts), on the TestClock. */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { TestClock } from "effect/testing"
import { makeTyping, TYPING_EVERY_MS } from "../../examples/telegram/typing.js"
import type { AgentEvent } from "../../src/agent/index.js"

const started = (session: string, kind: "user" | "heartbeat" = "user"): AgentEvent => ({
  type: "turn-started",
  kind,
  session,
  turn: 1,
  messages: 1
})

/** Lets the typing fibers run after an event or a clock step. */
const settle = Effect.forEach([1, 2, 3, 4], () => Effect.yieldNow, { discard: true })

const setup = (options: { readonly maxMs?: number; readonly fail?: boolean } = {}) =>
  Effect.gen(function*() {
    const calls: Array<string> = []
    const typing = yield* makeTyping({
      send: (chat) =>
        Effect.suspend(() => {
          calls.push(chat)
          return options.fail === true ? Effect.fail("Bad Gateway") : Effect.succeed(true)
        }),
      maxMs: options.maxMs ?? 60_000
    })
    return { calls, typing }
  })

describe("typing", () => {
  it.effect("sent when a user turn starts and every 4 s after, until the turn ends; failures change nothing", () =>
    Effect.gen(function*() {
      for (const end of ["turn-ended", "turn-failed"] as const) {
        const { calls, typing } = yield* setup({ fail: end === "turn-failed" })
        typing.onEvent(started("42"))
        yield* settle
        assert.deepStrictEqual(calls, ["42"])
        yield* TestClock.adjust(TYPING_EVERY_MS)
        yield* settle
        yield* TestClock.adjust(TYPING_EVERY_MS)
        yield* settle
        assert.deepStrictEqual(calls, ["42", "42", "42"])
        typing.onEvent(
          end === "turn-ended"
            ? { type: "turn-ended", kind: "user", session: "42", turn: 1, text: "hi", messages: 1, suppressed: false }
            : {
              type: "turn-failed",
              kind: "user",
              session: "42",
              error: "x",
              messages: 1,
              retryable: true,
              kept: true
            }
        )
        yield* settle
        yield* TestClock.adjust(TYPING_EVERY_MS * 5)
        yield* settle
        assert.strictEqual(calls.length, 3)
      }
    }))

  it.effect("only user turns; each chat its own; stops by itself after maxMs, and when its Scope closes", () =>
    Effect.gen(function*() {
      const scope = yield* Scope.make()
      const { calls, typing } = yield* setup({ maxMs: TYPING_EVERY_MS * 2 + 1 }).pipe(Scope.provide(scope))
      typing.onEvent(started("hb", "heartbeat"))
      typing.onEvent(started("1"))
      yield* settle
      typing.onEvent(started("2"))
      yield* settle
      assert.deepStrictEqual(calls, ["1", "2"])
      for (let i = 0; i < 4; i++) {
        yield* TestClock.adjust(TYPING_EVERY_MS)
        yield* settle
      }
      // at 0, 4 and 8 s each; stopped at 8 s + 1 ms
      assert.deepStrictEqual([...calls].sort(), ["1", "1", "1", "2", "2", "2"])
      typing.onEvent(started("3"))
      yield* settle
      yield* Scope.close(scope, Exit.void)
      yield* TestClock.adjust(TYPING_EVERY_MS * 3)
      yield* settle
      assert.strictEqual(calls.filter((c) => c === "3").length, 1)
    }))
})
