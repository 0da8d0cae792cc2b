/**
 * switchyard's chatbot: `npm run chat -- [options]` (see `--help`), or
 * `npm run chat -- deliveries [--state-dir <dir>] [--retry-dead]`.
 */
import { runChat } from "./chat.js"
import { makeProgram } from "./cli.js"
import { runDeliveries } from "./deliveries.js"

makeProgram({ onChat: runChat, onDeliveries: runDeliveries }).parse(process.argv)
