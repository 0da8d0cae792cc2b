/**
 * The append path's one-walk check and encoder (messageBytes.ts) against `JSON.stringify`: for any
 * message it takes, its bytes are exactly the UTF-8 of `JSON.stringify` of the message in the log's
 * field order, and its copy is what `JSON.parse` gives back; everything it leaves to `checkMessage`
 * (values JSON cannot carry, `toJSON`, cycles, bad fields, re-entry, a text over the limit) is left
 * to it, never encoded differently.
 */
import { assert, describe, it } from "@effect/vitest"
import fc from "fast-check"
import { MessageBytes } from "../../src/delivery/messageBytes.js"
import type { OutboundMessage } from "../../src/delivery/types.js"
import { checkMessage, MAX_BODY_DEPTH } from "../../src/delivery/validate.js"

/** Strings that reach every branch of the string writer: escapes, controls, non-ASCII, pairs and lone halves, long. */
const text = fc.oneof(
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.string({
    unit: fc.constantFrom("a", "\"", "\\", "\n", "\u0001", "\u007f", "é", "\u2028", "\uD83D", "\uDE00"),
    maxLength: 40
  }),
  fc.string({ unit: "grapheme", minLength: 16, maxLength: 80 }),
  fc.string({ unit: "binary-ascii", minLength: 200, maxLength: 700 }),
  fc.constantFrom("", "x", "lorem ipsum dolor sit amet consectetur", "é".repeat(300))
)
const number = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, -0, 7, 10, 99, 2 ** 31 - 1, 2 ** 31, -(2 ** 31), 1e21, 1.5e-7, Number.MAX_SAFE_INTEGER, 5e-324)
)
const body = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    text,
    number,
    fc.boolean(),
    fc.constant(null),
    fc.array(tie("value"), { maxLength: 5 }),
    fc.dictionary(fc.oneof(text, fc.constantFrom("__proto__", "0", "12", "toString")), tie("value"), { maxKeys: 5 })
  )
})).value
const field = text.filter((s) => s.length > 0 && (s as unknown as { isWellFormed: () => boolean }).isWellFormed())

const logOrder = (m: OutboundMessage): string =>
  JSON.stringify(
    m.idempotencyKey === undefined
      ? { channel: m.channel, to: m.to, body: m.body }
      : { channel: m.channel, to: m.to, body: m.body, idempotencyKey: m.idempotencyKey }
  )

describe("MessageBytes", () => {
  it("writes exactly the UTF-8 of JSON.stringify, and copies the message as JSON.parse gives it back", () => {
    const enc = new MessageBytes()
    fc.assert(
      fc.property(field, field, body, fc.option(field, { nil: undefined }), (channel, to, b, key) => {
        const m: OutboundMessage = key === undefined
          ? { channel, to, body: b }
          : { channel, to, body: b, idempotencyKey: key }
        const copy = enc.encode(m, 1 << 20)
        assert.isDefined(copy, "a plain message takes the one-walk path")
        const json = logOrder(m)
        const bytes = enc.buf.subarray(enc.start, enc.start + enc.bytes)
        assert.isTrue(bytes.equals(Buffer.from(json, "utf8")), `${bytes.toString("utf8")} !== ${json}`)
        assert.strictEqual(
          enc.ascii,
          Buffer.byteLength(json) === json.length,
          "ascii says whether every byte is below 0x80"
        )
        assert.deepStrictEqual(copy, JSON.parse(json))
        // checkMessage, the general path, writes the same text.
        const checked = checkMessage(m)
        assert.notInstanceOf(checked, Error)
        assert.strictEqual((checked as { json: string }).json, json)
      }),
      { numRuns: 400 }
    )
  })

  it("into a given buffer at an offset: the same bytes there, or in its scratch buffer past the end; nothing before the offset touched", () => {
    const enc = new MessageBytes()
    fc.assert(
      fc.property(
        field,
        body,
        fc.integer({ min: 0, max: 600 }),
        fc.integer({ min: 0, max: 6000 }),
        (to, b, at, room) => {
          const m: OutboundMessage = { channel: "telegram", to, body: b }
          const into = Buffer.alloc(at + room, 0xee)
          const copy = enc.encode(m, 1 << 20, into, at)
          assert.isDefined(copy)
          const json = Buffer.from(logOrder(m), "utf8")
          assert.isTrue(enc.buf.subarray(enc.start, enc.start + enc.bytes).equals(json))
          // Where it was asked to be, or (the writer reserves for the worst case of escaping) moved whole
          // to the start of the scratch buffer; with room to spare, always where it was asked to be.
          if (enc.buf === into) assert.strictEqual(enc.start, at)
          else assert.strictEqual(enc.start, 0)
          if (room >= 8 * json.length + 16) assert.strictEqual(enc.buf, into)
          assert.isTrue(into.subarray(0, at).every((x) => x === 0xee), "nothing written before the offset")
        }
      ),
      { numRuns: 300 }
    )
  })

  it("-0 becomes 0 in the copy, as in JSON", () => {
    const enc = new MessageBytes()
    const copy = enc.encode({ channel: "c", to: "t", body: { a: -0, b: [-0] } }, 1 << 20)
    assert.isTrue(Object.is((copy!.body as { a: number }).a, 0))
    assert.isTrue(Object.is((copy!.body as { b: Array<number> }).b[0], 0))
  })

  it("leaves to checkMessage what JSON cannot carry, toJSON, cycles, depth, bad fields, re-entry and a text over the limit", () => {
    const enc = new MessageBytes()
    const cyclic: Record<string, unknown> = { a: 1 }
    cyclic.self = cyclic
    let deep: unknown = 0
    for (let i = 0; i < MAX_BODY_DEPTH + 1; i++) deep = [deep]
    const holey: Array<number> = []
    holey[0] = 1
    holey[2] = 3
    const cases: Array<[string, unknown]> = [
      ["undefined", { a: undefined }],
      ["a hole", holey],
      ["a function", { f: () => 1 }],
      ["NaN", [Number.NaN]],
      ["Infinity", Number.POSITIVE_INFINITY],
      ["a BigInt", 1n],
      ["a symbol", Symbol("s")],
      ["a Date (toJSON)", { at: new Date(0) }],
      [
        "a class instance",
        new (class Point {
          x = 1
        })()
      ],
      ["a Map", new Map()],
      ["a cycle", cyclic],
      ["too deep", deep]
    ]
    for (const [what, b] of cases) {
      assert.isUndefined(enc.encode({ channel: "c", to: "t", body: b }, 1 << 20), what)
    }
    for (
      const m of [
        { channel: "", to: "t", body: 1 },
        { channel: "c", to: "\uD800", body: 1 },
        { channel: "c", to: "t", body: 1, idempotencyKey: "" },
        { channel: 1, to: "t", body: 1 },
        null,
        "message"
      ]
    ) {
      assert.isUndefined(enc.encode(m as unknown as OutboundMessage, 1 << 20), JSON.stringify(m))
    }
    assert.isUndefined(enc.encode({ channel: "c", to: "t", body: "x".repeat(2000) }, 1000), "over the limit")
    assert.isUndefined(
      enc.encode({ channel: "c", to: "t", body: Array.from({ length: 5000 }, () => "yyyyyyyyyy") }, 1000),
      "over the limit, found while walking"
    )
    // A getter that appends while the walk runs: the inner call is left to checkMessage, the outer one still encodes right.
    let inner: OutboundMessage | undefined | "unset" = "unset"
    const outer = {
      channel: "c",
      to: "t",
      body: {
        get v() {
          inner = enc.encode({ channel: "c2", to: "t2", body: 2 }, 1 << 20)
          return "value"
        }
      }
    }
    const copy = enc.encode(outer, 1 << 20)
    assert.isUndefined(inner, "re-entry goes the general way")
    assert.deepStrictEqual(copy, { channel: "c", to: "t", body: { v: "value" } })
    assert.strictEqual(
      enc.buf.subarray(0, enc.bytes).toString(),
      "{\"channel\":\"c\",\"to\":\"t\",\"body\":{\"v\":\"value\"}}"
    )
    // A getter that throws: left to checkMessage, and the encoder works on afterwards.
    const throwing = {
      channel: "c",
      to: "t",
      body: {
        get v(): never {
          throw new Error("boom")
        }
      }
    }
    assert.isUndefined(enc.encode(throwing, 1 << 20))
    assert.isDefined(enc.encode({ channel: "c", to: "t", body: [1, 2] }, 1 << 20))
    assert.strictEqual(enc.buf.subarray(0, enc.bytes).toString(), "{\"channel\":\"c\",\"to\":\"t\",\"body\":[1,2]}")
  })
})
