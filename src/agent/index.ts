/**
 * switchyard/agent — a chat agent runtime on the queue and the delivery log.
 *
 * Reading order, bottom-up (every file imports only files before it, and queue/delivery):
 * - `errors.ts`, `Model.ts` (the model service), `Channel.ts` (where replies go), `retries.ts`,
 *   `turnErrors.ts`; the models `ScriptedModel.ts`, `sdkRetries.ts` (the SDK's retries told), `AnthropicModel.ts`; `Transcripts.ts` (a
 *   session's journal), `Heartbeat.ts`, `CronJobs.ts`, `stateDir.ts`.
 * - `events.ts`, `replies.ts` (a reply as log entries), `logHealth.ts`, then `types.ts` (the public
 *   shapes: options, errors, reports).
 * - `options.ts` (validation), `sendChecks.ts` (what `send` refuses), `answer.ts` (one turn's work:
 *   model call, record, reply logged) and `turns.ts` (user, heartbeat and cron turns on the queue);
 *   `Agent.ts` (`Agent.make`, the public module) on top, `main.ts` (signals, exit codes) over it.
 */
export * as Agent from "./Agent.js"
export type {
  AgentOptions,
  AgentSnapshot,
  LogHealthStatus,
  SendError,
  ShutdownReport,
  TurnError,
  TurnFailure,
  UnansweredSession
} from "./Agent.js"
export * as AnthropicModel from "./AnthropicModel.js"
export * from "./Channel.js"
export { cronSession, parseCronFlag, parseJobs } from "./CronJobs.js"
export type { CronJob, ParsedCronJob } from "./CronJobs.js"
export * from "./errors.js"
export type { AgentEvent, TurnResult } from "./events.js"
export { HEARTBEAT_SESSION, isHeartbeatOk } from "./Heartbeat.js"
export type { HeartbeatOptions } from "./Heartbeat.js"
export { exitAfterFlush, runMain, serve, signalExitCode } from "./main.js"
export type { MainContext, ShutdownSignal, StopReason } from "./main.js"
export * from "./Model.js"
export { MessageTooLarge } from "./replies.js"
export { RETRY_DELAYS_MS } from "./retries.js"
export * as ScriptedModel from "./ScriptedModel.js"
export { isReservedSession } from "./sendChecks.js"
export * as Transcripts from "./Transcripts.js"
export { TranscriptError } from "./Transcripts.js"
export { DEFAULT_WEBHOOK_TIMEOUT_MS, parseWebhookUrl, WebhookChannel } from "./WebhookChannel.js"
export type { WebhookChannelOptions } from "./WebhookChannel.js"
