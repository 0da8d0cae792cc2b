/**
 * An offline, deterministic `Model`: the embedded default of the chatbot and the model of the
 * runtime's tests. It never touches the network.
 *
 * Reply rule: the turn's new user messages are the user messages after the last assistant
 * message of the transcript. If there is at least one and every one of them is a heartbeat
 * prompt (it equals `DEFAULT_HEARTBEAT_PROMPT` or contains `HEARTBEAT_OK`), the reply is exactly
 * `HEARTBEAT_OK`; otherwise it is `You said: ` followed by their texts joined with ` / `.
 *
 * Timing: the reply completes `latencyMs` after the call, measured on the Effect `Clock` (so a
 * `TestClock` drives it). The text streams through `onText` word by word during the end of that
 * wait, and the concatenated chunks always equal the reply text; without `onText` the reply is one wait
 * (no timer per word: the cluster's turns and benchmarks pay for none).
 */
import { Effect, Layer } from "effect"
import {
  DEFAULT_HEARTBEAT_PROMPT,
  HEARTBEAT_OK,
  Model,
  type ModelReply,
  type ModelRequest,
  type TranscriptMessage
} from "./Model.js"

/** Options of {@link layer}. */
export interface ScriptedModelOptions {
  /** How long each reply takes, in milliseconds (default 300). An integer from 0 and up. */
  readonly latencyMs?: number
}

/** The latency of a reply when `latencyMs` is not given. */
export const DEFAULT_LATENCY_MS = 300

/** Chunks of a streamed reply are at most this far apart, so a TTY sees words arrive briskly. */
const MAX_CHUNK_GAP_MS = 40

/** Whether `text` is a heartbeat prompt: the default one, or any prompt that mentions `HEARTBEAT_OK`. */
export const isHeartbeatPrompt = (text: string): boolean =>
  text === DEFAULT_HEARTBEAT_PROMPT || text.includes(HEARTBEAT_OK)

/** The user messages after the last assistant message: what this turn has to answer. */
export const newUserMessages = (transcript: ReadonlyArray<TranscriptMessage>): Array<string> => {
  let start = transcript.length
  while (start > 0 && transcript[start - 1]!.role === "user") start--
  const out: Array<string> = []
  for (let i = start; i < transcript.length; i++) out.push(transcript[i]!.content)
  return out
}

/** The scripted model's reply to a transcript (the rule in this module's doc comment). Pure. */
export const scriptedReply = (transcript: ReadonlyArray<TranscriptMessage>): string => {
  const fresh = newUserMessages(transcript)
  if (fresh.length > 0 && fresh.every(isHeartbeatPrompt)) return HEARTBEAT_OK
  return `You said: ${fresh.join(" / ")}`
}

/** Splits text into word chunks (each word keeps the whitespace after it); they join back to `text`. */
export const wordChunks = (text: string): Array<string> => text.length === 0 ? [] : text.split(/(?<=\s)(?=\S)/)

const validateLatency = (latencyMs: unknown): number => {
  if (typeof latencyMs !== "number" || !Number.isInteger(latencyMs) || latencyMs < 0) {
    throw new TypeError(
      `Expected \`latencyMs\` to be an integer from 0 and up, got \`${String(latencyMs)}\` (${typeof latencyMs})`
    )
  }
  return latencyMs
}

const sleepMs = (ms: number): Effect.Effect<void> => (ms > 0 ? Effect.sleep(ms) : Effect.void)

/**
 * Builds the scripted `reply`. The wait before the first chunk plus the gaps between chunks add
 * up to exactly `latencyMs`, so the reply completes at `latencyMs` whatever its length.
 * Interruptible at every wait.
 */
export const make = (options: ScriptedModelOptions = {}): Model["Service"] => {
  const latencyMs = validateLatency(options.latencyMs ?? DEFAULT_LATENCY_MS)
  return {
    reply: (request: ModelRequest): Effect.Effect<ModelReply> =>
      Effect.gen(function*() {
        const text = scriptedReply(request.transcript)
        const onText = request.onText
        // Nobody streams the text: one wait, the same reply at the same time, without a timer per word.
        if (onText === undefined) {
          yield* sleepMs(latencyMs)
          return { text, stopReason: "end_turn" } satisfies ModelReply
        }
        const chunks = wordChunks(text)
        const gaps = Math.max(chunks.length - 1, 0)
        const gap = gaps === 0 ? 0 : Math.min(MAX_CHUNK_GAP_MS, Math.floor(latencyMs / 2 / gaps))
        yield* sleepMs(latencyMs - gap * gaps)
        for (let i = 0; i < chunks.length; i++) {
          if (i > 0) yield* sleepMs(gap)
          onText(chunks[i]!)
        }
        return { text, stopReason: "end_turn" } satisfies ModelReply
      })
  }
}

/**
 * The `Model` layer of the scripted model. Throws a `TypeError` at once when `latencyMs` is not
 * an integer from 0 and up.
 */
export const layer = (options: ScriptedModelOptions = {}): Layer.Layer<Model> => Layer.succeed(Model, make(options))
