/**
 * What the file log refuses before writing: strings it could not store exactly (a lone surrogate has
 * no UTF-8 form and came back as U+FFFD after a reopen), and bodies nested past the depth limit
 * (they overflowed the stack instead of being refused).
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { DeliveryLog } from "../../src/delivery/index.js"
import { loneSurrogateAt, MAX_BODY_DEPTH } from "../../src/delivery/validate.js"
import { failure, snapshotFiles, tempRoot } from "./fixtures/files.js"

const tmp = tempRoot("log-input")
afterAll(tmp.rm)

const open = (dir: string) => DeliveryLog.open({ dir, fsync: "never" })

/** An array nested `depth` levels deep (depth 1 is `[0]`). */
const nested = (depth: number): unknown => {
  let v: unknown = 0
  for (let i = 0; i < depth; i++) v = [v]
  return v
}

describe("DeliveryLog input checks", () => {
  it("loneSurrogateAt finds the first unpaired half and passes pairs", () => {
    assert.strictEqual(loneSurrogateAt("order-1"), -1)
    assert.strictEqual(loneSurrogateAt("order-\uD83D\uDE00"), -1, "a pair (an emoji) is well-formed")
    assert.strictEqual(loneSurrogateAt("order-\uD800"), 6, "a high half at the end")
    assert.strictEqual(loneSurrogateAt("\uDC00x"), 0, "a low half first")
    assert.strictEqual(loneSurrogateAt("a\uD800b"), 1, "a high half followed by no low half")
    assert.strictEqual(loneSurrogateAt("\uD83D\uDE00\uDE00"), 2, "a low half after a complete pair")
    for (const s of ["", "x", "\uD83D\uDE00", "a\uD800", "\uDFFFz", "\uDBFF\uDFFF"]) {
      // Node 20 has it, the TypeScript lib of the project does not.
      const wellFormed = (s as unknown as { isWellFormed: () => boolean }).isWellFormed()
      assert.strictEqual(loneSurrogateAt(s) === -1, wellFormed, JSON.stringify(s))
    }
  })

  it.effect("a key, channel or to with a lone surrogate is invalid, named with its index, and nothing is written", () =>
    Effect.scoped(
      Effect.gen(function*() {
        const dir = tmp.next()
        const log = yield* open(dir)
        yield* log.flush
        const before = snapshotFiles(dir)
        const cases = [
          [{ channel: "c", to: "a", body: 1, idempotencyKey: "order-\uD800" }, "idempotencyKey", "\\uD800 at index 6"],
          [{ channel: "c\uDC01", to: "a", body: 1 }, "channel", "\\uDC01 at index 1"],
          [{ channel: "c", to: "\uD801", body: 1 }, "to", "\\uD801 at index 0"]
        ] as const
        for (const [message, field, where] of cases) {
          const e = yield* failure(log.append(message))
          assert.strictEqual(e.reason, "invalid", e.message)
          assert.include(e.message, `\`${field}\``)
          assert.include(e.message, "well-formed UTF-16")
          assert.include(e.message, where)
        }
        assert.deepStrictEqual(yield* log.pending, [])
        yield* log.flush
        assert.deepStrictEqual(snapshotFiles(dir), before, "nothing reached the disk")
      })
    ))

  it.effect("a key with a surrogate pair comes back exactly after a reopen and still dedupes", () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const key = "order-\uD83D\uDE00"
      const first = yield* Effect.scoped(
        Effect.flatMap(
          open(dir),
          (log) => log.append({ channel: "c\uD83D\uDE00", to: "a", body: 1, idempotencyKey: key })
        )
      )
      yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* open(dir)
          const got = yield* log.get(first.id)
          assert.isTrue(Option.isSome(got))
          assert.strictEqual(Option.getOrThrow(got).message.idempotencyKey, key)
          assert.strictEqual(Option.getOrThrow(got).message.channel, "c\uD83D\uDE00")
          const again = yield* log.append({ channel: "c", to: "a", body: 2, idempotencyKey: key })
          assert.strictEqual(again.id, first.id, "the same key returns the same entry")
          const other = yield* log.append({ channel: "c", to: "a", body: 3, idempotencyKey: "order-\uFFFD" })
          assert.notStrictEqual(other.id, first.id, "U+FFFD is another key")
          assert.strictEqual((yield* log.pending).length, 2)
        })
      )
    }))

  it.effect(`a body nested ${MAX_BODY_DEPTH} deep is kept across a reopen; deeper (and 3,000 deep) is invalid naming the limit`, () =>
    Effect.gen(function*() {
      const dir = tmp.next()
      const deepest = nested(MAX_BODY_DEPTH)
      const kept = yield* Effect.scoped(
        Effect.gen(function*() {
          const log = yield* open(dir)
          for (const depth of [MAX_BODY_DEPTH + 1, 3_000]) {
            const e = yield* failure(log.append({ channel: "c", to: "a", body: nested(depth) }))
            assert.strictEqual(e.reason, "invalid", e.message)
            assert.include(e.message, "`body`")
            assert.include(e.message, `at most ${MAX_BODY_DEPTH}`)
            assert.notInclude(e.message, "call stack")
          }
          assert.deepStrictEqual(yield* log.pending, [])
          return yield* log.append({ channel: "c", to: "a", body: deepest })
        })
      )
      const back = yield* Effect.scoped(Effect.flatMap(open(dir), (log) => log.get(kept.id)))
      assert.deepStrictEqual(Option.getOrThrow(back).message.body, deepest)
    }))
})
