/**
 * Node 20's readline, as the chatbot's prompt uses it in a terminal, with three of its faults worked around
 * (each seen in tmux; Node's own code in lib/internal/readline/interface.js):
 *
 * 1. A pasted chunk's characters (all but its last) are inserted by a fast path that appends them to the
 *    end of the line whatever the cursor: `hello world`, Home, a paste of `>> ` sent `h> ello world>`
 *    while the screen showed something else. Later Node versions insert at the cursor; here the fast path
 *    is given that insert for a cursor inside the line (the chunk's last character, on the normal path,
 *    then redraws the line once).
 * 2. That fast path echoes without counting the rows it fills, so after a paste longer than a row the
 *    next redraw (a Backspace) started a row too low and drew the first row twice: after every key,
 *    readline's `prevRows` is set to the row the cursor is on, as a redraw leaves it.
 * 3. readline counts a TAB to the next multiple of 8 from the prompt's start, across rows; a terminal
 *    moves it at most to its row's last column, so near a row's end the screen and readline's count
 *    parted: what it echoes goes through `echoOutput`, which writes each TAB as the spaces counted for it.
 */
import type * as readline from "node:readline"
import { displayWidth, expandTabs, PROMPT } from "./screen.js"

/**
 * What readline echoes of `line` (the text typed) in `chunk`, with its TABs as the spaces readline counts
 * for them: to the next multiple of 8 columns from the prompt's start, across rows. A terminal moves a TAB
 * only to its row's last column, never onto the next row, so a TAB near a row's end took fewer columns
 * than readline counted, and its cursor moves (after a Backspace, say) drew rows twice. readline writes
 * the prompt with the whole line (a redraw), or the text just added at the line's end; anything else
 * passes as it is.
 */
export const echoed = (chunk: string, line: string): string => {
  if (!chunk.includes("\t")) return chunk
  if (chunk === PROMPT + line) return expandTabs(chunk, 0)
  if (line.endsWith(chunk)) {
    return expandTabs(chunk, displayWidth(expandTabs(PROMPT + line.slice(0, line.length - chunk.length), 0)))
  }
  return chunk
}

/** `out` for readline to echo into: its writes go through {@link echoed} with the line `typed()` returns. */
export const echoOutput = (out: NodeJS.WriteStream, typed: () => string | undefined): NodeJS.WriteStream =>
  new Proxy(out, {
    get(target, prop) {
      if (prop === "write") {
        return (chunk: unknown, ...rest: Array<unknown>): boolean => {
          const line = typed()
          const text = typeof chunk === "string" && line !== undefined ? echoed(chunk, line) : chunk
          return (target.write as (...args: Array<unknown>) => boolean)(text, ...rest)
        }
      }
      const value: unknown = Reflect.get(target, prop, target)
      return typeof value === "function" ? (value as (...args: Array<unknown>) => unknown).bind(target) : value
    }
  })

/** readline's fields used here: public in practice, absent from the types. */
type Internals = readline.Interface & {
  prevRows?: number
  isCompletionEnabled?: boolean
  cursor: number
  /** The insert (Node 20 routes its internal call through this legacy name). */
  _insertString?: (c: string) => void
}

/** Faults 1 and 2 (see the top): call once the interface reading `input` (a terminal) is made. */
export const fixPastes = (rl: readline.Interface, input: NodeJS.ReadStream): void => {
  const r = rl as Internals
  const insert = r._insertString
  // Absent (another Node): nothing to fix there.
  if (typeof insert === "function") {
    r._insertString = function(this: Internals, c: string) {
      if (this.isCompletionEnabled === false && this.cursor < this.line.length) {
        const editable = this as { line: string; cursor: number }
        editable.line = this.line.slice(0, this.cursor) + c + this.line.slice(this.cursor)
        editable.cursor += c.length
        return
      }
      insert.call(this, c)
    }
  }
  input.on("keypress", () => {
    r.prevRows = rl.getCursorPos().rows
  })
}
