/**
 * Where a cluster's Postgres transactions come from: reads the statements Postgres logged for one
 * database (`ALTER DATABASE <db> SET log_statement = 'all'`, server log line prefix `%m [%p] %q%u@%d `,
 * the Debian default) and groups them into transactions per backend: a `BEGIN ... COMMIT` block is one,
 * a statement outside one is one (as `pg_stat_database.xact_commit` counts them). Each transaction is
 * named by the first statement in it that a rule below recognises, and the rule says whose it is
 * (effect/cluster's own storage, or switchyard's code).
 */
import * as fs from "node:fs"

interface Rule {
  readonly name: string
  readonly whose: "effect/cluster" | "switchyard" | "other"
  readonly match: RegExp
}

/** First match wins; matched against one statement's text (whitespace collapsed). */
const RULES: ReadonlyArray<Rule> = [
  { name: "save a Run (INSERT cluster_messages)", whose: "effect/cluster", match: /^INSERT INTO "cluster_messages"/ },
  {
    name: "duplicate send: look up the saved Run",
    whose: "effect/cluster",
    match: /FROM "cluster_messages" m LEFT JOIN "cluster_replies" r ON r\.id = m\.last_reply_id WHERE m\.message_id/
  },
  {
    name: "read unprocessed messages (UPDATE last_read)",
    whose: "effect/cluster",
    match: /UPDATE "cluster_messages" m SET last_read/
  },
  {
    name: "save a reply (UPDATE processed + INSERT cluster_replies)",
    whose: "effect/cluster",
    match: /UPDATE "cluster_messages" SET processed/
  },
  {
    name: "reply polling (SELECT cluster_replies)",
    whose: "effect/cluster",
    match: /FROM "cluster_replies" WHERE request_id IN/
  },
  {
    name: "read messages by id",
    whose: "effect/cluster",
    match: /FROM "cluster_messages" m LEFT JOIN "cluster_replies" r ON r\.id = m\.last_reply_id WHERE m\.id IN/
  },
  {
    name: "runner heartbeat (UPDATE cluster_runners), before a lock check",
    whose: "effect/cluster",
    match: /UPDATE "cluster_runners" SET last_heartbeat/
  },
  { name: "shard lock check (pg_locks)", whose: "effect/cluster", match: /FROM pg_locks/ },
  {
    name: "runners, locks, assignments",
    whose: "effect/cluster",
    match: /cluster_runners|cluster_locks|pg_try_advisory_lock|pg_advisory_unlock/
  },
  { name: "reset messages (last_read = NULL)", whose: "effect/cluster", match: /SET last_read = NULL/ },
  {
    name: "coalescing slot + inbox row",
    whose: "switchyard",
    match: /_coalesce_slot\(|INSERT INTO \w+_coalesce|FROM \w+_coalesce .* FOR UPDATE/
  },
  { name: "mark a coalescing slot started", whose: "switchyard", match: /UPDATE \w+_coalesce SET started = true/ },
  { name: "inbox row", whose: "switchyard", match: /INSERT INTO \w+_inbox/ },
  { name: "inbox lookup (client message id)", whose: "switchyard", match: /SELECT run_id FROM \w+_inbox/ },
  {
    name: "turn start: slot started + inbox rows + history",
    whose: "switchyard",
    match: /_turn_start\(|'inbox' AS src/
  },
  {
    name: "turn commit (fenced: outbox, transcript, turn record)",
    whose: "switchyard",
    match: /WITH gate AS MATERIALIZED/
  },
  { name: "delivery claim", whose: "switchyard", match: /WITH heads AS/ },
  { name: "delivery ack", whose: "switchyard", match: /SET status = 'acked'/ },
  { name: "delivery other (attempt, lease, release)", whose: "switchyard", match: /\w+_outbox/ },
  { name: "generations and members", whose: "switchyard", match: /_members|_generations|LISTEN|NOTIFY/ },
  { name: "fencing epochs", whose: "switchyard", match: /_shard_epochs/ },
  { name: "cron firings", whose: "switchyard", match: /_cron_firings/ },
  { name: "retention", whose: "switchyard", match: /^DELETE FROM/ },
  { name: "turn records, transcripts", whose: "switchyard", match: /_turns|_transcripts/ }
]

const TX_CONTROL = /^(BEGIN|START TRANSACTION|COMMIT|ROLLBACK|SAVEPOINT|RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT)\b/i

/** One database's logged statements from `offset` of the server log on. */
export const readStatements = (
  file: string,
  database: string,
  from: number,
  to: number
): Array<{ readonly pid: string; readonly text: string }> => {
  const fd = fs.openSync(file, "r")
  const buf = Buffer.alloc(Math.max(0, to - from))
  fs.readSync(fd, buf, 0, buf.length, from)
  fs.closeSync(fd)
  const out: Array<{ pid: string; text: string }> = []
  const head = new RegExp(`^\\d{4}-\\d\\d-\\d\\d [\\d:.]+ \\w+ \\[(\\d+)\\] (\\S*)@(\\S*) (\\w+):  (.*)$`)
  let current: { pid: string; text: string } | undefined
  for (const line of buf.toString("utf8").split("\n")) {
    const m = head.exec(line)
    if (m !== null) {
      current = undefined
      if (m[3] !== database || m[4] !== "LOG") continue
      const body = /^(?:statement|execute [^:]*): (.*)$/.exec(m[5])
      if (body === null) continue
      current = { pid: m[1], text: body[1] }
      out.push(current)
    } else if (current !== undefined && !/^\d{4}-/.test(line)) {
      current.text += " " + line
    }
  }
  for (const s of out) s.text = s.text.replace(/\s+/g, " ").trim()
  return out
}

const classify = (text: string): Rule | undefined => RULES.find((r) => r.match.test(text))

/** Transactions (BEGIN..COMMIT blocks and lone statements) per backend, named by their first recognised statement. */
export const attribute = (
  statements: ReadonlyArray<{ readonly pid: string; readonly text: string }>
): {
  readonly transactions: number
  readonly rows: Array<{ name: string; whose: string; count: number; example: string }>
} => {
  const open = new Map<string, Array<string>>()
  const counts = new Map<string, { name: string; whose: string; count: number; example: string }>()
  let transactions = 0
  const done = (texts: ReadonlyArray<string>) => {
    transactions++
    const body = texts.filter((t) => !TX_CONTROL.test(t))
    let rule: Rule | undefined
    for (const t of body) {
      rule = classify(t)
      if (rule !== undefined) break
    }
    const name = rule?.name ?? (body[0] ?? texts[0] ?? "").slice(0, 90)
    const key = `${rule?.whose ?? "other"}|${name}`
    const row = counts.get(key) ??
      { name, whose: rule?.whose ?? "other", count: 0, example: body[0]?.slice(0, 160) ?? "" }
    row.count++
    counts.set(key, row)
  }
  for (const s of statements) {
    const block = open.get(s.pid)
    if (/^(BEGIN|START TRANSACTION)\b/i.test(s.text)) {
      open.set(s.pid, [s.text])
    } else if (/^(COMMIT|ROLLBACK|END)\b/i.test(s.text) && !/^ROLLBACK TO/i.test(s.text)) {
      if (block !== undefined) {
        block.push(s.text)
        open.delete(s.pid)
        done(block)
      }
    } else if (block !== undefined) {
      block.push(s.text)
    } else {
      done([s.text])
    }
  }
  return { transactions, rows: [...counts.values()].sort((a, b) => b.count - a.count) }
}
