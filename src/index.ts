/** switchyard — a named-lane command queue for chat agents, on Effect 4. */
export * from "./agent/index.js"
export * from "./delivery/index.js"
export * from "./queue/index.js"
