/** Shared helpers of the agent tests: a recording model, a gated model, and an agent harness with an event log to wait on. */
import { Deferred, Effect, Exit } from "effect"
import type { Scope } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Agent, Model, ScriptedModel } from "../../src/agent/index.js"
import type { AgentEvent, AgentOptions, Channel, ModelRequest } from "../../src/agent/index.js"
import { scriptedReply } from "../../src/agent/ScriptedModel.js"
import type { DeliveryEntry, DeliveryLog } from "../../src/delivery/index.js"

export const tempDir = Effect.acquireRelease(
  Effect.sync(() => fs.mkdtempSync(path.join(os.tmpdir(), "switchyard-agent-"))),
  (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
)

/**
 * `log` without its fused calls (`appendAndMark`, `ackAndMark`): a wrapper that overrides `append` or
 * `ack` must drop them, or the queue would call past it.
 */
export const withoutFused = <L extends DeliveryLog>(log: L): Omit<L, "appendAndMark" | "ackAndMark"> => {
  const { ackAndMark: _ackAndMark, appendAndMark: _appendAndMark, ...rest } = log
  return rest
}

/** The scripted model, recording every request. */
export const recording = (latencyMs = 0) => {
  const requests: Array<ModelRequest> = []
  const inner = ScriptedModel.make({ latencyMs })
  const service: Model["Service"] = {
    reply: (request) => Effect.suspend(() => (requests.push(request), inner.reply(request)))
  }
  return { requests, service }
}

/** A model whose every call waits until the test releases it; replies by the scripted rule. */
export const gated = () => {
  const requests: Array<ModelRequest> = []
  const gates: Array<Deferred.Deferred<void>> = []
  const callWaiters: Array<{ readonly count: number; readonly done: Deferred.Deferred<void> }> = []
  /** Waits until the model has been called `count` times in all. */
  const calls = (count: number) =>
    Effect.suspend(() => {
      if (requests.length >= count) return Effect.void
      const done = Deferred.makeUnsafe<void>()
      callWaiters.push({ count, done })
      return Effect.andThen(Deferred.await(done), Effect.yieldNow)
    })
  const service: Model["Service"] = {
    reply: (request) =>
      Effect.suspend(() => {
        const gate = Deferred.makeUnsafe<void>()
        gates.push(gate)
        requests.push(request)
        // Last: a waiter may run at once when its Deferred completes.
        for (const w of callWaiters) if (requests.length >= w.count) Deferred.doneUnsafe(w.done, Exit.void)
        return Effect.as(Deferred.await(gate), { text: scriptedReply(request.transcript) })
      })
  }
  const release = (i: number) => Deferred.succeed(gates[i]!, undefined)
  /** Releases the call whose last message is `text`. */
  const releaseFor = (text: string) =>
    Effect.suspend(() => release(requests.findIndex((r) => r.transcript.at(-1)?.content === text)))
  const releaseAll = Effect.suspend(() =>
    Effect.forEach(gates, (g) => Deferred.succeed(g, undefined), { discard: true })
  )
  return { requests, service, calls, release, releaseFor, releaseAll }
}

/** Builds an agent in the test's Scope, with a recording channel and an event log to wait on. */
export const harness = (
  model: Model["Service"],
  options: Partial<AgentOptions> & { readonly stateDir?: string; readonly beforeClose?: Effect.Effect<unknown> } = {}
): Effect.Effect<
  {
    readonly agent: Agent.Agent
    readonly stateDir: string
    readonly delivered: Array<DeliveryEntry>
    readonly events: Array<AgentEvent>
    readonly waitFor: (match: (e: AgentEvent) => boolean, count?: number) => Effect.Effect<void>
  },
  unknown,
  Scope.Scope
> =>
  Effect.gen(function*() {
    const stateDir = options.stateDir ?? (yield* tempDir)
    const delivered: Array<DeliveryEntry> = []
    const events: Array<AgentEvent> = []
    const waiters: Array<
      { readonly match: (e: AgentEvent) => boolean; readonly count: number; readonly done: Deferred.Deferred<void> }
    > = []
    const check = () => {
      for (const w of waiters) if (events.filter(w.match).length >= w.count) Deferred.doneUnsafe(w.done, Exit.void)
    }
    const channel: Channel = options.channel ??
      { name: "test", send: (entry) => Effect.sync(() => void delivered.push(entry)) }
    const agent = yield* Agent.make({
      stateDir,
      fsync: "never",
      ...options,
      channel,
      onEvent: (event) => {
        events.push(event)
        check()
      }
    }).pipe(Effect.provideService(Model, model))
    // Runs before the agent's own shutdown (finalizers run in reverse), so no turn waits forever.
    if (options.beforeClose !== undefined) yield* Effect.addFinalizer(() => Effect.asVoid(options.beforeClose!))
    const waitFor = (match: (e: AgentEvent) => boolean, count = 1) =>
      Effect.suspend(() => {
        const done = Deferred.makeUnsafe<void>()
        waiters.push({ match, count, done })
        check()
        // The waiter may be resumed inside the agent's `emit`: yield so the agent's fiber goes on first.
        return Effect.andThen(Deferred.await(done), Effect.yieldNow)
      })
    return { agent, stateDir, delivered, events, waitFor }
  })

export const started = (kind: string, n?: number) => (e: AgentEvent) =>
  e.type === "turn-started" && e.kind === kind && (n === undefined || e.turn === n)
export const isDelivered = (e: AgentEvent) => e.type === "delivered"
export const bodyOf = (entry: DeliveryEntry) => entry.message.body as Record<string, unknown>
