/**
 * switchyard's chatbot: `npm run chat -- [options]` (see `--help`), or
 * `npm run chat -- deliveries [--state-dir <dir>] [--retry-dead]`.
 *
 * The options and the state paths are checked first, with only commander loaded: a bad one is
 * one line and exit 1 at once, before the banner, and nothing is written. The agent loads after.
 */
import { makeProgram } from "./cli.js"
import { prepareStatePaths } from "./paths.js"

makeProgram({
  onChat: (options) => {
    const problem = prepareStatePaths(options)
    if (problem !== undefined) {
      process.stderr.write(problem + "\n")
      process.exitCode = 1
      return
    }
    void import("./chat.js").then(({ runChat }) => runChat(options))
  },
  onDeliveries: (options) => void import("./deliveries.js").then(({ runDeliveries }) => runDeliveries(options))
}).parse(process.argv)
