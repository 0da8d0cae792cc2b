/**
 * Run by Tiering.test.ts in a child process (`node --allow-natives-syntax --no-concurrent-recompilation
 * --import tsx tieringProbe.ts <apply: 0 | 1> <calls>`): calls a small function `calls` times, with the runner's
 * tiering applied (as runner-main.ts does, first) or not, and prints whether V8 optimised it with TurboFan.
 */
if (process.argv[2] === "1") await import("../../src/cluster/TieringApplied.js")
const calls = Number(process.argv[3])
// V8's intrinsics, only with --allow-natives-syntax; through `Function` so the file stays TypeScript.
// eslint-disable-next-line @typescript-eslint/no-implied-eval -- the intrinsics' syntax is not TypeScript
const optimizationStatus = new Function("f", "return %GetOptimizationStatus(f)") as (f: unknown) => number
// eslint-disable-next-line @typescript-eslint/no-implied-eval -- the intrinsics' syntax is not TypeScript
const neverOptimize = new Function("f", "%NeverOptimizeFunction(f)") as (f: unknown) => void
/** V8's `OptimizationStatus::kTurboFanned`. */
const TURBOFANNED = 1 << 6

const hot = (o: { readonly a: number; readonly b: number }) => o.a + o.b * 2
// The caller is never optimised, so `hot` is called (not inlined) every time.
const drive = (n: number) => {
  let sum = 0
  for (let i = 0; i < n; i++) sum += hot({ a: i, b: 1 })
  return sum
}
neverOptimize(drive)
drive(calls)
process.stdout.write(JSON.stringify({ turbofan: (optimizationStatus(hot) & TURBOFANNED) !== 0 }) + "\n")
