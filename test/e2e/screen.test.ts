/** The chatbot's terminal arithmetic: where a terminal wraps a line. */
import { describe, expect, it } from "vitest"
import { displayWidth, wrapRows } from "../../examples/chatbot/screen.js"

describe("wrapRows", () => {
  it("cuts a line into the rows a terminal fills and the last row", () => {
    expect(wrapRows("abcdefghij", 4)).toEqual({ rows: ["abcd", "efgh"], rest: "ij" })
    expect(wrapRows("abc", 4)).toEqual({ rows: [], rest: "abc" })
    expect(wrapRows("", 4)).toEqual({ rows: [], rest: "" })
  })

  it("a row filled to the last column is a row; nothing is left", () => {
    expect(wrapRows("abcdefgh", 4)).toEqual({ rows: ["abcd", "efgh"], rest: "" })
  })

  it("a wide character that does not fit starts the next row; combining marks take no column", () => {
    // "abc" + a CJK character (2 columns) on 4 columns: the terminal leaves the last column empty.
    expect(wrapRows("abc漢d", 4)).toEqual({ rows: ["abc"], rest: "漢d" })
    expect(wrapRows("abc漢de", 4)).toEqual({ rows: ["abc", "漢de"], rest: "" })
    expect(wrapRows("ab漢漢", 4)).toEqual({ rows: ["ab漢"], rest: "漢" })
    expect(wrapRows("e\u0301e\u0301e\u0301e\u0301x", 4)).toEqual({ rows: ["e\u0301e\u0301e\u0301e\u0301"], rest: "x" })
    // Emoji outside the basic plane are one character (two UTF-16 units) of two columns.
    expect(wrapRows("a😀😀b", 4)).toEqual({ rows: ["a😀"], rest: "😀b" })
  })

  it("joined, the rows and the rest are the line; each row's width is at most the columns", () => {
    const line = Array.from({ length: 300 }, (_, i) => (i % 7 === 0 ? "漢" : i % 11 === 0 ? "😀" : "w" + i)).join(" ")
    expect(wrapRows("漢x", 1)).toEqual({ rows: ["漢", "x"], rest: "" })
    for (const columns of [2, 3, 17, 80]) {
      const { rest, rows } = wrapRows(line, columns)
      expect(rows.join("") + rest).toBe(line)
      for (const row of rows) expect(displayWidth(row)).toBeLessThanOrEqual(columns)
      expect(displayWidth(rest)).toBeLessThan(Math.max(columns, 2))
    }
  })
})
