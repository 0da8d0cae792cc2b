/** The chatbot's terminal arithmetic: where a terminal wraps a line. */
import { EventEmitter } from "node:events"
import { describe, expect, it } from "vitest"
import { displayWidth, expandTabs, makeScreen, visible, wrapRows } from "../../examples/chatbot/screen.js"

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

describe("visible", () => {
  it("shows control characters as their pictures and leaves text, LF and TAB as they are", () => {
    expect(visible("\x1b[2J\x1b]0;pwned\x07")).toBe("\u241b[2J\u241b]0;pwned\u2407")
    expect(visible("a\bb\x00\x7f")).toBe("a\u2408b\u2400\u2421")
    expect(visible("8-bit CSI \x9b2J")).toBe("8-bit CSI \ufffd2J")
    expect(visible("tab\there\nnext 漢 😀 e\u0301")).toBe("tab\there\nnext 漢 😀 e\u0301")
  })

  it("drops the CR of a line's end (CRLF, or split before the LF of the next chunk) and shows a bare one", () => {
    expect(visible("one\r\ntwo\r")).toBe("one\ntwo")
    expect(visible("progress 10%\rprogress 90%")).toBe("progress 10%\u240dprogress 90%")
  })
})

/** A terminal's output stream as the screen uses it: what was written, joined. */
const fakeTerminal = () => {
  const written: Array<string> = []
  const out = Object.assign(new EventEmitter(), {
    columns: 40,
    rows: 10,
    write: (text: string) => {
      written.push(text)
      return true
    }
  })
  return { out: out as unknown as NodeJS.WriteStream, text: () => written.join("") }
}

describe("the screen prints text, never a command to the terminal", () => {
  it("a printed line and a streamed reply reach the terminal with their control characters shown", () => {
    const out = fakeTerminal()
    const err = fakeTerminal()
    const screen = makeScreen(out.out, err.out)
    screen.print("line \x1b]0;pwned\x07", "out")
    screen.print("error \x1b[31mred", "err")
    screen.thinking(true)
    screen.stream("reply \x1b[2J")
    screen.stream("\x1b[Hmore\r")
    screen.stream("\nnext\r\n")
    screen.endStream()
    // The screen's own sequences (erase the live part) are the only ESC it writes.
    const sequences = out.text().split("\x1b").slice(1)
    expect(sequences.length).toBeGreaterThan(0)
    for (const sequence of sequences) expect(sequence).toMatch(/^\[(\d+A|J)/)
    expect(err.text()).toBe("error \u241b[31mred\n")
    expect(out.text()).toContain("line \u241b]0;pwned\u2407\n")
    expect(out.text()).toContain("bot> reply \u241b[2J\u241b[Hmore\n")
    expect(out.text()).toContain("next\n")
    expect(out.text()).not.toContain("\r\n")
  })
})

describe("tabs", () => {
  it("expandTabs: the spaces to the next multiple of 8 columns, from where the text starts; a LF starts at 0", () => {
    expect(expandTabs("a\tb", 0)).toBe("a       b")
    expect(expandTabs("a\tb", 5)).toBe("a  b")
    expect(expandTabs("\t\t", 3)).toBe(" ".repeat(5 + 8))
    expect(expandTabs("x\ny\tz", 6)).toBe("x\ny       z")
    expect(expandTabs("漢\t", 0)).toBe("漢      ") // a wide character takes 2 columns
    expect(expandTabs("no tab", 3)).toBe("no tab")
  })

  it("a streamed line with tabs is erased by the rows it takes (a TAB counted as one column left rows behind)", () => {
    const out = fakeTerminal()
    const screen = makeScreen(out.out, fakeTerminal().out)
    // `bot> ` and six `\tx`: 49 columns on a 40-column terminal, two rows; 17 if a TAB were one column.
    screen.stream("\tx".repeat(6))
    screen.stream("y")
    screen.endStream()
    expect(out.text()).not.toContain("\t")
    expect(out.text()).toContain(`bot> ${expandTabs("\tx".repeat(6), 5)}\x1b[1A\r\x1b[J`)
    expect(out.text().endsWith(`bot> ${expandTabs("\tx".repeat(6), 5)}y\n`)).toBe(true)
  })

  it("a printed line's tabs are spaces too", () => {
    const out = fakeTerminal()
    const err = fakeTerminal()
    makeScreen(out.out, err.out).print("a\tb", "err")
    expect(err.text()).toBe("a       b\n")
  })

  it("a typed line with tabs: the rows readline echoed it on are erased, counted as readline counts them", () => {
    const out = fakeTerminal()
    const screen = makeScreen(out.out, fakeTerminal().out)
    const rl = { setPrompt: () => {}, prompt: () => {}, getCursorPos: () => ({ rows: 0, cols: 0 }) }
    screen.attach(rl as unknown as Parameters<typeof screen.attach>[0])
    screen.thinking(true)
    // `you> ` and five `\tx`: 41 columns on 40, two rows as readline echoed it (15 with a TAB as one column).
    screen.entered("\tx".repeat(5))
    expect(out.text()).toContain(`\x1b[3A\r\x1b[Jyou> ${"\tx".repeat(5)}\n`)
  })
})
