// Runs a command (argv after the file name) with the terminal as its stdio, and writes how it
// ended, `{"code":n,"signal":s}`, to the file. tmux reaps its pane's process late, or not at all,
// on a loaded machine (a zombie with no status): the test reads the file instead.
import { spawn } from "node:child_process"
import * as fs from "node:fs"

const [file, command, ...args] = process.argv.slice(2)
// The terminal's Ctrl+C reaches the whole foreground process group: it is for the command.
process.on("SIGINT", () => {})
// So does the terminal's hangup (its window closed): this process stays to record how the command ended.
process.on("SIGHUP", () => {})
const child = spawn(command, args, { stdio: "inherit" })
child.on("exit", (code, signal) => {
  fs.writeFileSync(`${file}.tmp`, JSON.stringify({ code, signal }))
  fs.renameSync(`${file}.tmp`, file)
  // After a hangup the terminal is gone: Node 20 would abort at exit putting it back in its mode
  // (ResetStdio), so the descriptors are closed first (it skips closed ones).
  for (const fd of [0, 1, 2]) {
    try {
      fs.closeSync(fd)
    } catch {
      // not open
    }
  }
  process.exit(0)
})
