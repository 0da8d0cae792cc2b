/**
 * A runner's JavaScript reaches its optimised code sooner. V8 optimises a function (TurboFan, on a worker
 * thread) once it has run through its interrupt budget a few times; at the default budget (67,584 bytecode
 * bytes) a function that runs once per message needs thousands of messages, so a runner that answered
 * 1,500 messages (the cluster bench's warm phase) was still compiling: 150 to 200 optimisations in its next
 * 1,500 messages, ~0.2 to 0.36 ms of CPU per message on V8's compiler thread, and the code not yet optimised
 * run by the interpreter and baseline code meanwhile (bench/README.md, session 17). A quarter of the budget
 * moves that work to a runner's first few hundred messages; what a message costs once every hot function is
 * optimised does not change.
 */
import * as v8 from "node:v8"

/** The interrupt budget a runner sets (V8's default: 67,584). */
export const INTERRUPT_BUDGET = 16_384

/** Sets the runner's V8 tiering; call before the runner's code runs (it applies to budgets set from then on). */
export const apply = (): void => {
  v8.setFlagsFromString(`--interrupt-budget=${INTERRUPT_BUDGET}`)
}
