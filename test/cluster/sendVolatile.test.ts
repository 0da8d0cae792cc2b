/**
 * A volatile run's dispatcher (send.ts `sendVolatile`) reads the run's stored answer before each send
 * again: when its sends reach no owner (effect/cluster routes the key nowhere while the shard changes
 * hands, as after its own runner's SIGSTOP: the waiting client had its answer 16 s after the wake-up,
 * the owner's commit 2 s before it), the answer the owner committed settles the run at the next send
 * again. Time is the TestClock; the client and the store are fakes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Queue } from "effect"
import { TestClock } from "effect/testing"
import { sendVolatile } from "../../src/cluster/send.js"

const payload = {
  runId: "coalesce:main:s2:1",
  lane: "main",
  key: "s2",
  generation: 0,
  command: { text: "hi" },
  admittedAt: 0
}

/**
 * Starts `sendVolatile` with a client whose sends reach no owner (none ever comes back) and `stored` as the
 * store; `sends` gets each send's `replay` in order ("first" for the first send): taking one waits for it.
 */
const routedNowhere = (stored: () => Effect.Effect<Exit.Exit<unknown, unknown> | undefined>) =>
  Effect.gen(function*() {
    const sends = yield* Queue.unbounded<string>()
    const got = Deferred.makeUnsafe<Exit.Exit<unknown, unknown>>()
    yield* sendVolatile({
      client: { RunNow: (p) => Effect.andThen(Queue.offer(sends, p.replay ?? "first"), Effect.never) },
      payload,
      scope: yield* Effect.scope,
      resendMs: 2_000,
      onReply: (exit) => Deferred.succeed(got, exit),
      stored
    })
    return { sends, got }
  })

describe("a volatile run's sends again read its stored answer", () => {
  it.effect("sends that reach no owner: the answer stored meanwhile settles the run at the next send again", () =>
    Effect.scoped(Effect.gen(function*() {
      let committed = false
      let reads = 0
      const { got, sends } = yield* routedNowhere(() =>
        Effect.sync(() => {
          reads++
          return committed ? Exit.succeed({ text: "You said: hi" }) : undefined
        })
      )
      assert.strictEqual(yield* Queue.take(sends), "first")
      assert.strictEqual(reads, 0)
      yield* TestClock.adjust(2_000)
      // The first send again: nothing stored yet, so it is sent.
      assert.strictEqual(yield* Queue.take(sends), "dispatcher")
      assert.strictEqual(reads, 1)
      assert.isFalse(Deferred.isDoneUnsafe(got))
      committed = true
      yield* TestClock.adjust(2_000)
      assert.deepStrictEqual(yield* Deferred.await(got), Exit.succeed({ text: "You said: hi" }))
      // Answered from the store: no third send.
      assert.deepStrictEqual([reads, yield* Queue.size(sends)], [2, 0])
    })))

  it.effect("a stored answer that is not the run's outcome (a transport failure's shape) is not taken: the run is sent again", () =>
    Effect.scoped(Effect.gen(function*() {
      const { got, sends } = yield* routedNowhere(() =>
        Effect.succeed(Exit.fail({ _tag: "EntityNotAssignedToRunner" }))
      )
      assert.strictEqual(yield* Queue.take(sends), "first")
      yield* TestClock.adjust(2_000)
      assert.strictEqual(yield* Queue.take(sends), "dispatcher")
      yield* TestClock.adjust(2_000)
      assert.strictEqual(yield* Queue.take(sends), "dispatcher")
      assert.isFalse(Deferred.isDoneUnsafe(got))
    })))
})
