/**
 * The spellings the spec writes, checked by `npm run typecheck` (this file is in tsconfig's `include`):
 * `DeliveryLog`, `DeliveryQueue` and `CommandQueue` are each usable as a value (`DeliveryLog.open`), as a
 * type (`log: DeliveryLog`, spec/delivery.md) and as a namespace of types (`DeliveryLog.DeliveryLog`,
 * `DeliveryLog.OpenOptions`). Imported through the entry points a user imports (src/index.ts and the
 * subpaths), so a regression to `export * as` (TS2709, "Cannot use namespace as a type") fails CI.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import { describe, expect, expectTypeOf, it } from "vitest"
import * as DeliveryLogModule from "../../src/delivery/DeliveryLog.js"
import * as DeliveryQueueModule from "../../src/delivery/DeliveryQueue.js"
import { DeliveryLog, DeliveryQueue } from "../../src/delivery/index.js"
import type { DeliveryEntry, DeliveryLogError } from "../../src/delivery/index.js"
import * as Root from "../../src/index.js"
import * as CommandQueueModule from "../../src/queue/CommandQueue.js"
import { CommandQueue } from "../../src/queue/index.js"
import type { LanesConfigInvalid } from "../../src/queue/index.js"

// The spec's own spellings (spec/delivery.md, spec/command-queue.md) as a user writes them.
const pendingOf = (log: DeliveryLog): Effect.Effect<ReadonlyArray<DeliveryEntry>> => log.pending
const queueOf = (options: { readonly log: DeliveryLog }): Effect.Effect<DeliveryQueue, never, Scope.Scope> =>
  DeliveryQueue.make({ log: options.log, deliver: () => Effect.void })
const dispatchOn = (queue: CommandQueue) => queue.dispatch("main", "k", Effect.succeed(1))

describe("the spec's spellings of DeliveryLog, DeliveryQueue and CommandQueue", () => {
  it("each name is a type, the same type as its namespace's interface", () => {
    expectTypeOf<DeliveryLog>().toEqualTypeOf<DeliveryLog.DeliveryLog>()
    expectTypeOf<DeliveryLog>().toEqualTypeOf<DeliveryLogModule.DeliveryLog>()
    expectTypeOf<DeliveryQueue>().toEqualTypeOf<DeliveryQueue.DeliveryQueue>()
    expectTypeOf<CommandQueue>().toEqualTypeOf<CommandQueue.CommandQueue>()
    expectTypeOf<Root.DeliveryLog>().toEqualTypeOf<DeliveryLog>()
    expectTypeOf<Root.DeliveryQueue>().toEqualTypeOf<DeliveryQueue>()
    expectTypeOf<Root.CommandQueue>().toEqualTypeOf<CommandQueue>()
    expectTypeOf(pendingOf).parameter(0).toEqualTypeOf<DeliveryLog>()
    expectTypeOf(dispatchOn).parameter(0).toEqualTypeOf<CommandQueue.CommandQueue>()
  })

  it("the namespaces hold the modules' types", () => {
    expectTypeOf<DeliveryLog.OpenOptions>().toEqualTypeOf<DeliveryLogModule.OpenOptions>()
    expectTypeOf<DeliveryQueue.Options>().toEqualTypeOf<DeliveryQueueModule.Options>()
    expectTypeOf<DeliveryQueue.Stats>().toEqualTypeOf<DeliveryQueueModule.Stats>()
    expectTypeOf<DeliveryQueue.Classify>().toEqualTypeOf<DeliveryQueueModule.Classify>()
    expectTypeOf<CommandQueue.LaneLimits>().toEqualTypeOf<CommandQueueModule.LaneLimits>()
    expectTypeOf<CommandQueue.Future<number, string>>().toEqualTypeOf<CommandQueueModule.Future<number, string>>()
    expectTypeOf<CommandQueue.DispatchOptions<number, never>>().toEqualTypeOf<
      CommandQueueModule.DispatchOptions<number, never>
    >()
  })

  it("each name is its module at run time, with the spec's signatures", () => {
    expectTypeOf(DeliveryLog.open).toEqualTypeOf<
      (options: DeliveryLog.OpenOptions) => Effect.Effect<DeliveryLog, DeliveryLogError, Scope.Scope>
    >()
    expectTypeOf(queueOf).returns.toEqualTypeOf<Effect.Effect<DeliveryQueue, never, Scope.Scope>>()
    expectTypeOf(CommandQueue.make).returns.toEqualTypeOf<
      Effect.Effect<CommandQueue, LanesConfigInvalid, Scope.Scope>
    >()
    // The same objects as before (`export * as`): the module namespaces, at every entry point.
    for (
      const [exported, module] of [
        [DeliveryLog, DeliveryLogModule],
        [DeliveryQueue, DeliveryQueueModule],
        [CommandQueue, CommandQueueModule],
        [Root.DeliveryLog, DeliveryLogModule],
        [Root.DeliveryQueue, DeliveryQueueModule],
        [Root.CommandQueue, CommandQueueModule]
      ] as const
    ) {
      expect(exported).toBe(module)
    }
    expect(Object.keys(DeliveryLog).sort()).toEqual(["open"])
  })
})
