/** Imported first by runner-main.ts: applies the runner's V8 tiering (Tiering.ts) before the rest is evaluated. */
import * as Tiering from "./Tiering.js"

Tiering.apply()
