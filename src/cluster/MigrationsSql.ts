/**
 * The SQL of switchyard's migrations: the statements each numbered migration runs, in order, for the
 * tables of a prefix. `Migrations.ts` runs them (by id, under the schema lock); this file only holds
 * the texts, so a schema change reads as what it is. An entry that has been applied somewhere never
 * changes, not even by a byte: a new table or column is a new numbered entry at the end
 * (test/cluster/Migrations.test.ts pins the texts of the existing ones).
 */
import { ingressOwnersSql } from "./IngressOwnersSql.js"
import { slotStartSql } from "./SlotStartSql.js"

/** The statements that create the outbox table of `PgDeliveryLog` and its indexes (idempotent). */
export const outboxSql = (table: string): ReadonlyArray<string> => [
  `CREATE TABLE IF NOT EXISTS ${table} (
      seq bigserial PRIMARY KEY,
      id text NOT NULL UNIQUE,
      channel text NOT NULL,
      recipient text NOT NULL,
      body text NOT NULL,
      idempotency_key text,
      enqueued_at bigint NOT NULL,
      attempts integer NOT NULL DEFAULT 0,
      last_error text,
      next_attempt_at bigint,
      status text NOT NULL,
      acked_at bigint,
      lease_owner text,
      lease_until bigint
    )`,
  // The "attempt started" mark (DeliveryLog.markStarted); added to tables made before it existed.
  `ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS attempt_started boolean NOT NULL DEFAULT false`,
  `CREATE INDEX IF NOT EXISTS ${table}_live ON ${table} (channel, recipient, seq) WHERE status = 'pending'`,
  `CREATE INDEX IF NOT EXISTS ${table}_status ON ${table} (status, seq)`,
  `CREATE INDEX IF NOT EXISTS ${table}_ikey ON ${table} (idempotency_key) WHERE idempotency_key IS NOT NULL`
]

/**
 * switchyard's migrations for the tables of `prefix`: each id and name (`0001_tables`) with its
 * statements. `0001` says `IF NOT EXISTS` because databases set up before the migrator existed have
 * these tables but no history.
 */
export const switchyardMigrationsSql = (prefix: string): Readonly<Record<string, ReadonlyArray<string>>> => ({
  "0001_tables": [
    ...outboxSql(`${prefix}_outbox`),
    // ClusterQueue: lane generations, membership, coalescing slots.
    `CREATE TABLE IF NOT EXISTS ${prefix}_generations (lane text PRIMARY KEY, generation bigint NOT NULL)`,
    `CREATE TABLE IF NOT EXISTS ${prefix}_members (
        member text PRIMARY KEY, seen_at bigint NOT NULL, applied jsonb NOT NULL DEFAULT '{}'::jsonb)`,
    `CREATE TABLE IF NOT EXISTS ${prefix}_coalesce (
        lane text NOT NULL, key text NOT NULL, slot bigint NOT NULL, started boolean NOT NULL, PRIMARY KEY (lane, key))`,
    // ClusterAgent: transcripts and turn records.
    `CREATE TABLE IF NOT EXISTS ${prefix}_transcripts (
        id bigserial PRIMARY KEY, session text NOT NULL, run_id text NOT NULL, role text NOT NULL, content text NOT NULL,
        UNIQUE (run_id, role))`,
    `CREATE INDEX IF NOT EXISTS ${prefix}_transcripts_session ON ${prefix}_transcripts (session, id)`,
    `CREATE TABLE IF NOT EXISTS ${prefix}_turns (
        id bigserial PRIMARY KEY, session text NOT NULL, runner text NOT NULL, run_id text NOT NULL,
        started_at bigint NOT NULL, ended_at bigint NOT NULL)`,
    // ClusterCronJobs: one row per due time fired.
    `CREATE TABLE IF NOT EXISTS ${prefix}_cron_firings (
        job text NOT NULL, due_at bigint NOT NULL, runner text NOT NULL, fired integer NOT NULL DEFAULT 1,
        PRIMARY KEY (job, due_at))`
  ],
  // Fencing: one epoch per shard, bumped by the runner that acquires it (see Fencing.ts).
  "0002_shard_epochs": [
    `CREATE TABLE ${prefix}_shard_epochs (
        shard text PRIMARY KEY, epoch bigint NOT NULL, owner text NOT NULL, claimed_at bigint NOT NULL)`,
    `CREATE INDEX ${prefix}_turns_run ON ${prefix}_turns (run_id)`
  ],
  // The inbox (Inbox.ts): messages recorded for the run that answers them; a turn stores each as a
  // user row of its own (part 1, 2, ...), so the transcript is unique by (run_id, role, part).
  "0003_inbox": [
    `CREATE TABLE ${prefix}_inbox (
        id bigserial PRIMARY KEY, session text NOT NULL, message_id text, text text NOT NULL, run_id text NOT NULL,
        received_at bigint NOT NULL, UNIQUE (session, message_id))`,
    `CREATE INDEX ${prefix}_inbox_run ON ${prefix}_inbox (run_id)`,
    `ALTER TABLE ${prefix}_transcripts ADD COLUMN part integer NOT NULL DEFAULT 0`,
    `ALTER TABLE ${prefix}_transcripts DROP CONSTRAINT ${prefix}_transcripts_run_id_role_key`,
    `ALTER TABLE ${prefix}_transcripts ADD CONSTRAINT ${prefix}_transcripts_run_part UNIQUE (run_id, role, part)`
  ],
  // The shard and fencing epoch a turn committed under (NULL without a Fence): a run recorded twice
  // shows whether its shard changed hands in between (a higher epoch) or not.
  "0004_turn_epochs": [
    `ALTER TABLE ${prefix}_turns ADD COLUMN shard text, ADD COLUMN epoch bigint`
  ],
  // Fewer round trips and transactions per message (docs/cluster.md "What a message costs"): a
  // coalescing dispatch takes its slot and records its inbox message in one statement, and a turn marks
  // its slot started and reads its inbox rows and history in one. Functions, because each statement in
  // a VOLATILE PL/pgSQL function takes a fresh snapshot: the read after the slot's lock was waited for
  // sees every inbox row committed under that lock (one SQL statement would read its start snapshot).
  "0005_message_functions": [
    `CREATE FUNCTION ${prefix}_coalesce_slot(
          p_lane text, p_key text, p_session text, p_message_id text, p_text text, p_now bigint)
        RETURNS TABLE (out_slot bigint, out_joined boolean, out_run_id text)
        LANGUAGE plpgsql VOLATILE AS $fn$
        DECLARE
          v_slot bigint;
          v_started boolean;
          v_known text;
          v_run text;
        BEGIN
          IF p_message_id IS NOT NULL THEN
            SELECT i.run_id INTO v_known FROM ${prefix}_inbox i WHERE i.session = p_session AND i.message_id = p_message_id;
            IF v_known IS NOT NULL THEN
              RETURN QUERY SELECT NULL::bigint, true, v_known;
              RETURN;
            END IF;
          END IF;
          INSERT INTO ${prefix}_coalesce (lane, key, slot, started) VALUES (p_lane, p_key, 0, true)
            ON CONFLICT (lane, key) DO NOTHING;
          SELECT c.slot, c.started INTO v_slot, v_started FROM ${prefix}_coalesce c
            WHERE c.lane = p_lane AND c.key = p_key FOR UPDATE;
          IF v_started THEN
            v_slot := v_slot + 1;
            UPDATE ${prefix}_coalesce c SET slot = v_slot, started = false WHERE c.lane = p_lane AND c.key = p_key;
          END IF;
          v_run := 'coalesce:' || p_lane || ':' || p_key || ':' || v_slot;
          IF p_text IS NOT NULL THEN
            INSERT INTO ${prefix}_inbox (session, message_id, text, run_id, received_at)
              VALUES (p_session, p_message_id, p_text, v_run, p_now)
              ON CONFLICT (session, message_id) DO NOTHING;
            IF NOT FOUND THEN
              -- the same message id, sent again at the same moment, was recorded first: join its run
              SELECT i.run_id INTO v_known FROM ${prefix}_inbox i WHERE i.session = p_session AND i.message_id = p_message_id;
              RETURN QUERY SELECT NULL::bigint, true, v_known;
              RETURN;
            END IF;
          END IF;
          RETURN QUERY SELECT v_slot, NOT v_started, v_run;
        END
        $fn$`,
    `CREATE FUNCTION ${prefix}_turn_start(
          p_lane text, p_key text, p_slot bigint, p_run_id text, p_session text, p_history integer)
        RETURNS TABLE (src text, id double precision, role text, content text)
        LANGUAGE plpgsql VOLATILE AS $fn$
        BEGIN
          IF p_slot IS NOT NULL THEN
            UPDATE ${prefix}_coalesce c SET started = true WHERE c.lane = p_lane AND c.key = p_key AND c.slot = p_slot;
          END IF;
          RETURN QUERY
            SELECT 'inbox'::text, i.id::float8, 'user'::text, i.text FROM ${prefix}_inbox i WHERE i.run_id = p_run_id
            UNION ALL
            SELECT 'history'::text, t.id::float8, t.role, t.content FROM (
              SELECT h.id, h.role, h.content FROM ${prefix}_transcripts h WHERE h.session = p_session
              ORDER BY h.id DESC LIMIT p_history) t;
        END
        $fn$`
  ],
  // ClusterCronJobs.fire: the run a due time dispatched, written with the run's slot, so a replayed
  // firing of the due time finds it and starts nothing.
  "0006_cron_run": [
    `ALTER TABLE ${prefix}_cron_firings ADD COLUMN run_id text`
  ],
  // The ingress's runs are volatile effect/cluster requests; the inbox row is their durability
  // (Replay.ts): each row records its run's shard and generation, and its run's answer once it has one.
  // The slot function gains the two (a new overload; the old one stays for runners of the version
  // before), and a turn's start also returns its run's answer (a replay of an answered run).
  "0007_volatile_ingress": [
    `ALTER TABLE ${prefix}_inbox ADD COLUMN shard text, ADD COLUMN generation bigint, ADD COLUMN answer text`,
    `CREATE INDEX ${prefix}_inbox_unanswered ON ${prefix}_inbox (shard, id) WHERE answer IS NULL AND shard IS NOT NULL`,
    `CREATE FUNCTION ${prefix}_coalesce_slot(
          p_lane text, p_key text, p_session text, p_message_id text, p_text text, p_now bigint,
          p_shard text, p_generation bigint)
        RETURNS TABLE (out_slot bigint, out_joined boolean, out_run_id text)
        LANGUAGE plpgsql VOLATILE AS $fn$
        DECLARE
          v_slot bigint;
          v_started boolean;
          v_known text;
          v_run text;
        BEGIN
          IF p_message_id IS NOT NULL THEN
            SELECT i.run_id INTO v_known FROM ${prefix}_inbox i WHERE i.session = p_session AND i.message_id = p_message_id;
            IF v_known IS NOT NULL THEN
              RETURN QUERY SELECT NULL::bigint, true, v_known;
              RETURN;
            END IF;
          END IF;
          INSERT INTO ${prefix}_coalesce (lane, key, slot, started) VALUES (p_lane, p_key, 0, true)
            ON CONFLICT (lane, key) DO NOTHING;
          SELECT c.slot, c.started INTO v_slot, v_started FROM ${prefix}_coalesce c
            WHERE c.lane = p_lane AND c.key = p_key FOR UPDATE;
          IF v_started THEN
            v_slot := v_slot + 1;
            UPDATE ${prefix}_coalesce c SET slot = v_slot, started = false WHERE c.lane = p_lane AND c.key = p_key;
          END IF;
          v_run := 'coalesce:' || p_lane || ':' || p_key || ':' || v_slot;
          IF p_text IS NOT NULL THEN
            INSERT INTO ${prefix}_inbox (session, message_id, text, run_id, received_at, shard, generation)
              VALUES (p_session, p_message_id, p_text, v_run, p_now, p_shard, p_generation)
              ON CONFLICT (session, message_id) DO NOTHING;
            IF NOT FOUND THEN
              SELECT i.run_id INTO v_known FROM ${prefix}_inbox i WHERE i.session = p_session AND i.message_id = p_message_id;
              RETURN QUERY SELECT NULL::bigint, true, v_known;
              RETURN;
            END IF;
          END IF;
          RETURN QUERY SELECT v_slot, NOT v_started, v_run;
        END
        $fn$`,
    `CREATE OR REPLACE FUNCTION ${prefix}_turn_start(
          p_lane text, p_key text, p_slot bigint, p_run_id text, p_session text, p_history integer)
        RETURNS TABLE (src text, id double precision, role text, content text)
        LANGUAGE plpgsql VOLATILE AS $fn$
        BEGIN
          IF p_slot IS NOT NULL THEN
            UPDATE ${prefix}_coalesce c SET started = true WHERE c.lane = p_lane AND c.key = p_key AND c.slot = p_slot;
          END IF;
          RETURN QUERY
            SELECT 'inbox'::text, i.id::float8, 'user'::text, i.text FROM ${prefix}_inbox i WHERE i.run_id = p_run_id
            UNION ALL
            (SELECT 'answer'::text, a.id::float8, 'user'::text, a.answer FROM ${prefix}_inbox a
              WHERE a.run_id = p_run_id AND a.answer IS NOT NULL LIMIT 1)
            UNION ALL
            SELECT 'history'::text, t.id::float8, t.role, t.content FROM (
              SELECT h.id, h.role, h.content FROM ${prefix}_transcripts h WHERE h.session = p_session
              ORDER BY h.id DESC LIMIT p_history) t;
        END
        $fn$`
  ],
  // A turn's start commits without waiting for its WAL flush (`synchronous_commit = off` for its own
  // transaction only): its one write, the slot's `started`, matters only once something after it is
  // durable, and every later commit that could depend on it (the turn's fenced commit, the next
  // message's slot) flushes the WAL up to its own record, so this one with it. A Postgres crash that loses
  // it loses no commit made after it: the slot is not started, the run is unanswered and replayed.
  // One fsync less on every turn's path (docs/cluster.md "Commits and durability").
  "0008_turn_start_async": [
    `CREATE OR REPLACE FUNCTION ${prefix}_turn_start(
          p_lane text, p_key text, p_slot bigint, p_run_id text, p_session text, p_history integer)
        RETURNS TABLE (src text, id double precision, role text, content text)
        LANGUAGE plpgsql VOLATILE AS $fn$
        BEGIN
          IF p_slot IS NOT NULL THEN
            PERFORM set_config('synchronous_commit', 'off', true);
            UPDATE ${prefix}_coalesce c SET started = true WHERE c.lane = p_lane AND c.key = p_key AND c.slot = p_slot;
          END IF;
          RETURN QUERY
            SELECT 'inbox'::text, i.id::float8, 'user'::text, i.text FROM ${prefix}_inbox i WHERE i.run_id = p_run_id
            UNION ALL
            (SELECT 'answer'::text, a.id::float8, 'user'::text, a.answer FROM ${prefix}_inbox a
              WHERE a.run_id = p_run_id AND a.answer IS NOT NULL LIMIT 1)
            UNION ALL
            SELECT 'history'::text, t.id::float8, t.role, t.content FROM (
              SELECT h.id, h.role, h.content FROM ${prefix}_transcripts h WHERE h.session = p_session
              ORDER BY h.id DESC LIMIT p_history) t;
        END
        $fn$`
  ],
  // The slot statement starts the run of an idle session and returns its history (SlotStartSql.ts).
  "0009_slot_start": slotStartSql(prefix),
  // Each runner's ingress URL by its fencing token: runs go straight to their shard owner's ingress (Hop.ts).
  "0010_ingress_owners": ingressOwnersSql(prefix)
})
