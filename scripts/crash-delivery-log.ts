/**
 * `npm run crash:log [-- --rounds N]`: the long crash test of the delivery log. A child appending and
 * acking with 16 concurrent producers (test/delivery/fixtures/producer.ts, fsync "always") is
 * SIGKILLed dozens of times at random moments, with small segments and compaction running in the
 * child, plus compaction cut at each of its steps; after every kill the log is re-opened and checked:
 * every append that returned is there with an intact payload, nothing acked came back, nothing twice;
 * in every other round the appends carry idempotency keys, and each key whose append returned still
 * returns its entry (pending, or acked within the window); then a round killed at each step of writing a
 * running CHECKPOINT (keys, mostly acked). Exits 1 on the first violation.
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { join } from "node:path"
import {
  check,
  checkKeys,
  CHECKPOINT_STEPS,
  COMPACTION_STEPS,
  Model,
  runRound
} from "../test/delivery/fixtures/crashHarness.js"

const roundsArg = process.argv.indexOf("--rounds")
const rounds = roundsArg >= 0 ? Number(process.argv[roundsArg + 1]) : 40
const base = join(process.cwd(), ".bench-tmp")
mkdirSync(base, { recursive: true })
const root = mkdtempSync(join(base, "crash-log-"))
const steps = COMPACTION_STEPS

const main = async (): Promise<void> => {
  const model = new Model()
  const dir = join(root, "log")
  const started = Date.now()
  for (let round = 0; round < rounds + CHECKPOINT_STEPS.length; round++) {
    // Mostly random kills; every third round with compaction in the loop; some rounds crash inside a compaction
    // step; the last ones inside the writing of a running checkpoint.
    const kind = round % 3
    const args = round >= rounds
      ? ["--segment-bytes", "4096", "--ack-most", "--crash-at", CHECKPOINT_STEPS[round - rounds]!]
      : kind === 0
      ? ["--segment-bytes", "16384"]
      : kind === 1
      ? ["--segment-bytes", "4096", "--compact-every", String(3 + (round % 7))]
      : ["--segment-bytes", "4096", "--compact-every", "5", "--crash-at", steps[Math.floor(round / 3) % steps.length]!]
    const killAfter = round >= rounds ? 5000 : 20 + Math.floor(Math.random() * (kind === 2 ? 5000 : 1500))
    // Every other round appends with idempotency keys: after the kill each of them must still dedupe.
    const keyed = round % 2 === 1 || round >= rounds
    const r = await runRound(dir, round, model, killAfter, keyed ? [...args, "--keys"] : args)
    if (r.signal !== "SIGKILL") {
      throw new Error(`round ${round}: the child ended with ${r.code ?? r.signal}: ${r.stderr}`)
    }
    const c = await check(dir, model)
    const keysChecked = keyed ? await checkKeys(dir, model) : 0
    console.log(
      `round ${String(round).padStart(3)} ${
        [...args, ...(keyed ? ["--keys"] : [])].join(" ").padEnd(65)
      } killed after ${String(r.lines).padStart(5)} lines: ` +
        `ok (${c.pending} pending, ${c.segments} files; ${model.appended.size} appends, ${model.acked.size} acks seen${
          keyed ? `; ${keysChecked} keys still dedupe` : ""
        })`
    )
  }
  console.log(
    `\n${
      rounds + CHECKPOINT_STEPS.length
    } SIGKILLs, ${model.appended.size} appends and ${model.acked.size} acks checked in ${
      ((Date.now() - started) / 1000).toFixed(1)
    } s: nothing lost, nothing acked came back, nothing twice, every key of a returned append still dedupes.`
  )
}

main()
  .then(() => rmSync(root, { recursive: true, force: true }))
  .catch((e) => {
    console.error(`FAILED: ${(e as Error).message}\n(the log is kept in ${root})`)
    process.exit(1)
  })
