/** switchyard/agent — a chat agent runtime on the queue and the delivery log. */
export * from "./Model.js"
export * as ScriptedModel from "./ScriptedModel.js"
export * as AnthropicModel from "./AnthropicModel.js"
