/**
 * The chatbot's terminal: finished lines scroll up above a live part at the bottom. The live part
 * is the "…thinking" sign or the line of the reply that is streaming, then (while input is read)
 * the `you> ` prompt with what the user is typing, which readline echoes and edits.
 *
 * Every line printed goes through `print`: it erases the live part, prints the line, and draws the
 * live part again below it, so nothing is ever printed into the thinking sign or into the prompt.
 * The rows the live part takes are counted with the terminal's width (long lines wrap).
 *
 * When the terminal is resized it re-wraps what is on screen (tmux, xterm, GNOME Terminal, iTerm2 and
 * Windows Terminal all reflow), so the live part is erased with its rows counted at the new width and
 * drawn again. readline's own resize handler is taken off: it moves up by the rows the prompt took at
 * the old width, which on a narrower terminal lands inside the re-wrapped line and draws it twice.
 *
 * A reply's line that streams grows at its end only, so the live part never holds more than half the
 * screen of it: the rows above that are filled are printed as finished rows. Redrawn whole under every
 * chunk, a long line (a pasted text echoed, minified JSON) cost writes that grow with the square of its
 * length, and once taller than the screen it could no longer be erased: each chunk left a copy of it in
 * the scrollback.
 *
 * What is printed is text, never a command to the terminal: a model's reply (or a message quoted in
 * an error) can hold control characters, and `ESC [2J` would clear the screen, `ESC ]0;…` retitle the
 * window, a bare CR overwrite the line. `visible` shows each as its Unicode control picture (␛, ␍, ␇),
 * as `cat -v` does with its own notation; a line's CR before its LF (Windows line ends) is dropped.
 * A TAB is printed as the spaces it moves over (`expandTabs`), so the live part's rows are counted right.
 */
import type * as readline from "node:readline"
import { stripVTControlCharacters } from "node:util"

/** The prompt of a line typed. */
export const PROMPT = "you> "

/** The first line of a reply. */
export const BOT = "bot> "

/** The thinking sign. */
export const THINKING = "…thinking"

export interface Screen {
  /** Prints a finished line (on standard output or standard error); the thinking sign goes first. */
  readonly print: (line: string, to: "out" | "err") => void
  /** Shows (or clears) the thinking sign. */
  readonly thinking: (on: boolean) => void
  /** A chunk of the reply that streams: complete lines are printed, the last one stays live until the end. */
  readonly stream: (chunk: string) => void
  /** The streaming reply ended: its last line is printed. */
  readonly endStream: () => void
  /** The prompt is shown, and redrawn under every line printed, until `detach`. */
  readonly attach: (rl: readline.Interface) => void
  /** Removes the prompt (input ends); the live part stays. */
  readonly detach: () => void
  /** Call on readline's `line` event: the line typed stays on screen, the live part moves under it. */
  readonly entered: (line: string) => void
}

/** readline's own count of the rows of its prompt (a public property of `Interface` in practice, absent from the types). */
type Readline = readline.Interface & { prevRows?: number }

// Double-width characters (CJK, Hangul, fullwidth forms, most emoji); zero-width: combining marks.
const WIDE =
  /[\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6\u{1f300}-\u{1faff}\u{20000}-\u{3fffd}]/u
// eslint-disable-next-line no-misleading-character-class -- each combining mark is matched alone, on purpose
const ZERO = /[\u0300-\u036f\u200b-\u200f\ufe00-\ufe0f]/u

/** Columns a character (a code point) takes on a terminal. */
const charWidth = (char: string): number => (ZERO.test(char) ? 0 : WIDE.test(char) ? 2 : 1)

/** Columns `text` takes on a terminal. */
export const displayWidth = (text: string): number => {
  let width = 0
  for (const char of stripVTControlCharacters(text)) width += charWidth(char)
  return width
}

/**
 * Splits `text` (one line, no control sequences) where a terminal `columns` wide wraps it: the rows it
 * fills (a wide character that does not fit goes to the next row, as the terminal puts it) and the rest,
 * the last row, shorter than `columns` (possibly empty). No row is empty (a wide character alone is a
 * row on a terminal one column wide).
 */
export const wrapRows = (text: string, columns: number): { readonly rows: Array<string>; readonly rest: string } => {
  const rows: Array<string> = []
  let start = 0
  let at = 0
  let width = 0
  for (const char of text) {
    const w = charWidth(char)
    if (width + w > columns && width > 0) {
      rows.push(text.slice(start, at))
      start = at
      width = 0
    }
    width += w
    at += char.length
  }
  if (width === columns) {
    rows.push(text.slice(start))
    start = text.length
  }
  return { rows, rest: text.slice(start) }
}

// C0 controls but LF and TAB, DEL, and the C1 controls (which some terminals act on, as 8-bit CSI/OSC).
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\x00-\x08\x0b-\x1f\x7f-\x9f]/g

const picture = (char: string): string => {
  const code = char.charCodeAt(0)
  return code < 0x20 ? String.fromCharCode(0x2400 + code) : code === 0x7f ? "\u2421" : "\ufffd"
}

/**
 * `text` as a terminal shows it without acting on it: a CR that ends a line (or the text: a CRLF split
 * between two chunks) is dropped, every other control character but LF and TAB becomes its control
 * picture (U+2400 + code; DEL U+2421), a C1 control U+FFFD. One picture takes one column, as it did.
 */
export const visible = (text: string): string => text.replace(/\r+(?=\n|$)/g, "").replace(CONTROL, picture)

/** Tab stops are every 8 columns, as terminals set them. */
const TAB_STOP = 8

/**
 * `text` with each TAB replaced by the spaces a terminal moves over (to the next multiple of 8 columns,
 * counted from `column`, where the text starts on its line; a LF starts a new line at 0). The live part's
 * rows are counted from its text, so a TAB counted as one column would leave rows of it behind when it
 * is erased; spaces take the columns they are counted for.
 */
export const expandTabs = (text: string, column: number): string => {
  if (!text.includes("\t")) return text
  let out = ""
  let col = column
  for (const char of text) {
    if (char === "\t") {
      const spaces = TAB_STOP - (col % TAB_STOP)
      out += " ".repeat(spaces)
      col += spaces
    } else {
      out += char
      col = char === "\n" ? 0 : col + charWidth(char)
    }
  }
  return out
}

export const makeScreen = (out: NodeJS.WriteStream, err: NodeJS.WriteStream = process.stderr): Screen => {
  let rl: Readline | undefined
  let thinkingOn = false
  let streaming: { prefix: string; partial: string } | undefined
  /** Rows of the live text as drawn (0: none). */
  let liveRows = 0

  const columns = () => (out.columns !== undefined && out.columns > 0 ? out.columns : 80)
  /** The most rows of a streaming line kept live (redrawn under each chunk): half the screen. */
  const streamRows = () => Math.max(1, Math.floor((out.rows !== undefined && out.rows > 0 ? out.rows : 24) / 2))
  const rowsOf = (text: string) => Math.max(1, Math.ceil(displayWidth(text) / columns()))
  const live = (): string | undefined =>
    streaming !== undefined && (streaming.partial !== "" || streaming.prefix !== "")
      ? streaming.prefix + streaming.partial
      : thinkingOn
      ? THINKING
      : undefined

  const write = (text: string) => void out.write(text)

  /** Moves to the first row of the live part and clears everything below. */
  const erase = (extraRows = 0) => {
    const up = extraRows + (rl === undefined ? Math.max(0, liveRows - 1) : liveRows + rl.getCursorPos().rows)
    if (up === 0 && liveRows === 0 && rl === undefined) return
    if (up > 0) write(`\x1b[${up}A`)
    write("\r\x1b[J")
    liveRows = 0
  }

  const draw = () => {
    const text = live()
    if (text !== undefined) {
      write(rl === undefined ? text : text + "\n")
      liveRows = rowsOf(text)
    }
    if (rl !== undefined) {
      rl.prevRows = 0 // the cursor is on the prompt's first row: readline must not move up first
      rl.prompt(true)
    }
  }

  const resized = () => {
    const text = live()
    liveRows = text === undefined ? 0 : rowsOf(text)
    erase()
    draw()
  }
  out.on("resize", resized)

  const printLine = (line: string, to: "out" | "err") => {
    if (to === "out") write(expandTabs(visible(line), 0) + "\n")
    else err.write(expandTabs(visible(line), 0) + "\n")
  }

  return {
    print: (line, to) => {
      erase()
      thinkingOn = false
      printLine(line, to)
      draw()
    },
    thinking: (on) => {
      if (thinkingOn === on) return
      erase()
      thinkingOn = on
      draw()
    },
    stream: (chunk) => {
      erase()
      thinkingOn = false
      const s = (streaming ??= { prefix: BOT, partial: "" })
      const text = visible(chunk)
      s.partial += text.includes("\t") ? expandTabs(text, displayWidth(s.prefix + s.partial)) : text
      let nl: number
      while ((nl = s.partial.indexOf("\n")) >= 0) {
        write(s.prefix + s.partial.slice(0, nl) + "\n")
        s.prefix = ""
        s.partial = s.partial.slice(nl + 1)
      }
      const line = s.prefix + s.partial
      if (line.length > columns() && rowsOf(line) > streamRows()) {
        // Its filled rows are final: print them as rows of their own, the last one stays live.
        const { rest, rows } = wrapRows(line, columns())
        write(rows.join("\n") + "\n")
        s.prefix = ""
        s.partial = rest
      }
      draw()
    },
    endStream: () => {
      if (streaming === undefined) return
      erase()
      const s = streaming
      streaming = undefined
      if (s.partial !== "" || s.prefix !== "") write(s.prefix + s.partial + "\n")
      draw()
    },
    attach: (readline) => {
      erase()
      for (const listener of out.listeners("resize")) {
        // readline's (named so in Node's lib/internal/readline/interface.js); it removes it itself on close.
        if (listener.name === "onresize") out.removeListener("resize", listener as () => void)
      }
      rl = readline
      rl.setPrompt(PROMPT)
      draw()
    },
    detach: () => {
      if (rl === undefined) return
      erase()
      rl = undefined
      draw()
    },
    entered: (line) => {
      if (rl === undefined) return
      // readline left `you> <line>` and a new row; the cursor is at its start, readline's rows at 0.
      if (liveRows > 0) {
        // readline counts a TAB to the next multiple of 8 from the line's start, as expandTabs does
        const typedRows = Math.floor(displayWidth(expandTabs(PROMPT + line, 0)) / columns()) + 1
        write(`\x1b[${liveRows + typedRows}A\r\x1b[J`)
        write(PROMPT + line + "\n")
        liveRows = 0
      }
      draw()
    }
  }
}
