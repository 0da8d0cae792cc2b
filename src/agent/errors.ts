/** The agent runtime's own typed failures (the queue's and the delivery log's come from their parts). */
import * as Data from "effect/Data" // not the index: see CronJobs.ts

/** A bad option given to `Agent.make`; `field` names the option (its path), e.g. `"cron[0].schedule"`. */
export class AgentConfigInvalid extends Data.TaggedError("AgentConfigInvalid")<{
  readonly field: string
  readonly message: string
}> {}
