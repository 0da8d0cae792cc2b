/**
 * The cluster's whole Postgres schema, created once, under one lock.
 *
 * `migrate` runs in one transaction that first takes the advisory lock `switchyard-schema`; runners
 * that start at the same moment on an empty database queue on that lock, the first creates every
 * table, the others find the work recorded and do nothing. It runs, in order, effect/cluster's own
 * migrations (`cluster_messages`, `cluster_replies`, `cluster_runners`, `cluster_locks`, histories
 * `cluster_migrations` and `cluster_runner_migrations`) and switchyard's (`<prefix>_outbox`,
 * `_generations`, `_members`, `_coalesce`, `_transcripts`, `_turns`, `_cron_firings`, `_shard_epochs`, `_inbox`, history
 * `<prefix>_migrations`), all through Effect's SQL `Migrator`. A new table or column is a new
 * numbered entry in {@link switchyardMigrations}; an existing entry never changes.
 *
 * Nothing else in `src/cluster` creates a table: every other part needs the schema and says so.
 */
import { Effect } from "effect"
import { SqlMessageStorage, SqlRunnerStorage } from "effect/cluster"
import { SqlClient } from "effect/sql"
import * as Migrator from "effect/sql/Migrator"
import type { SqlError } from "effect/sql/SqlError"

/** The advisory lock every schema change of a switchyard cluster holds (its `hashtext` key). */
export const SCHEMA_LOCK = "switchyard-schema"

/**
 * Runs `self` in a transaction that holds {@link SCHEMA_LOCK} (released at commit or rollback), so no
 * two processes change the schema at once.
 */
export const withSchemaLock = <A, E, R>(
  self: Effect.Effect<A, E, R>
): Effect.Effect<A, E | SqlError, R | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    return yield* sql.withTransaction(
      Effect.andThen(sql`SELECT pg_advisory_xact_lock(hashtext(${SCHEMA_LOCK}))`, self)
    )
  })

/** The outbox table of `PgDeliveryLog` and its indexes (idempotent; run it under {@link withSchemaLock}). */
export const createOutbox = (table: string): Effect.Effect<void, SqlError, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS ${table} (
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
    )`)
    // The "attempt started" mark (DeliveryLog.markStarted); added to tables made before it existed.
    yield* sql.unsafe(`ALTER TABLE ${table} ADD COLUMN IF NOT EXISTS attempt_started boolean NOT NULL DEFAULT false`)
    yield* sql.unsafe(
      `CREATE INDEX IF NOT EXISTS ${table}_live ON ${table} (channel, recipient, seq) WHERE status = 'pending'`
    )
    yield* sql.unsafe(`CREATE INDEX IF NOT EXISTS ${table}_status ON ${table} (status, seq)`)
    yield* sql.unsafe(
      `CREATE INDEX IF NOT EXISTS ${table}_ikey ON ${table} (idempotency_key) WHERE idempotency_key IS NOT NULL`
    )
  })

/**
 * switchyard's migrations for the tables of `prefix`. `0001` says `IF NOT EXISTS` because databases
 * set up before the migrator existed have these tables but no history.
 */
export const switchyardMigrations = (prefix: string): Migrator.Loader =>
  Migrator.fromRecord({
    "0001_tables": Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* createOutbox(`${prefix}_outbox`)
      // ClusterQueue: lane generations, membership, coalescing slots.
      yield* sql.unsafe(
        `CREATE TABLE IF NOT EXISTS ${prefix}_generations (lane text PRIMARY KEY, generation bigint NOT NULL)`
      )
      yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS ${prefix}_members (
        member text PRIMARY KEY, seen_at bigint NOT NULL, applied jsonb NOT NULL DEFAULT '{}'::jsonb)`)
      yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS ${prefix}_coalesce (
        lane text NOT NULL, key text NOT NULL, slot bigint NOT NULL, started boolean NOT NULL, PRIMARY KEY (lane, key))`)
      // ClusterAgent: transcripts and turn records.
      yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS ${prefix}_transcripts (
        id bigserial PRIMARY KEY, session text NOT NULL, run_id text NOT NULL, role text NOT NULL, content text NOT NULL,
        UNIQUE (run_id, role))`)
      yield* sql.unsafe(
        `CREATE INDEX IF NOT EXISTS ${prefix}_transcripts_session ON ${prefix}_transcripts (session, id)`
      )
      yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS ${prefix}_turns (
        id bigserial PRIMARY KEY, session text NOT NULL, runner text NOT NULL, run_id text NOT NULL,
        started_at bigint NOT NULL, ended_at bigint NOT NULL)`)
      // ClusterCronJobs: one row per due time fired.
      yield* sql.unsafe(`CREATE TABLE IF NOT EXISTS ${prefix}_cron_firings (
        job text NOT NULL, due_at bigint NOT NULL, runner text NOT NULL, fired integer NOT NULL DEFAULT 1,
        PRIMARY KEY (job, due_at))`)
    }),
    // Fencing: one epoch per shard, bumped by the runner that acquires it (see Fencing.ts).
    "0002_shard_epochs": Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`CREATE TABLE ${prefix}_shard_epochs (
        shard text PRIMARY KEY, epoch bigint NOT NULL, owner text NOT NULL, claimed_at bigint NOT NULL)`)
      yield* sql.unsafe(`CREATE INDEX ${prefix}_turns_run ON ${prefix}_turns (run_id)`)
    }),
    // The inbox (Inbox.ts): messages recorded for the run that answers them; a turn stores each as a
    // user row of its own (part 1, 2, ...), so the transcript is unique by (run_id, role, part).
    "0003_inbox": Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`CREATE TABLE ${prefix}_inbox (
        id bigserial PRIMARY KEY, session text NOT NULL, message_id text, text text NOT NULL, run_id text NOT NULL,
        received_at bigint NOT NULL, UNIQUE (session, message_id))`)
      yield* sql.unsafe(`CREATE INDEX ${prefix}_inbox_run ON ${prefix}_inbox (run_id)`)
      yield* sql.unsafe(`ALTER TABLE ${prefix}_transcripts ADD COLUMN part integer NOT NULL DEFAULT 0`)
      yield* sql.unsafe(`ALTER TABLE ${prefix}_transcripts DROP CONSTRAINT ${prefix}_transcripts_run_id_role_key`)
      yield* sql.unsafe(
        `ALTER TABLE ${prefix}_transcripts ADD CONSTRAINT ${prefix}_transcripts_run_part UNIQUE (run_id, role, part)`
      )
    }),
    // The shard and fencing epoch a turn committed under (NULL without a Fence): a run recorded twice
    // shows whether its shard changed hands in between (a higher epoch) or not.
    "0004_turn_epochs": Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`ALTER TABLE ${prefix}_turns ADD COLUMN shard text, ADD COLUMN epoch bigint`)
    }),
    // Fewer round trips and transactions per message (docs/cluster.md "What a message costs"): a
    // coalescing dispatch takes its slot and records its inbox message in one statement, and a turn marks
    // its slot started and reads its inbox rows and history in one. Functions, because each statement in
    // a VOLATILE PL/pgSQL function takes a fresh snapshot: the read after the slot's lock was waited for
    // sees every inbox row committed under that lock (one SQL statement would read its start snapshot).
    "0005_message_functions": Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`CREATE FUNCTION ${prefix}_coalesce_slot(
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
        $fn$`)
      yield* sql.unsafe(`CREATE FUNCTION ${prefix}_turn_start(
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
        $fn$`)
    }),
    // ClusterCronJobs.fire: the run a due time dispatched, written with the run's slot, so a replayed
    // firing of the due time finds it and starts nothing.
    "0006_cron_run": Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`ALTER TABLE ${prefix}_cron_firings ADD COLUMN run_id text`)
    }),
    // The ingress's runs are volatile effect/cluster requests; the inbox row is their durability
    // (Replay.ts): each row records its run's shard and generation, and its run's answer once it has one.
    // The slot function gains the two (a new overload; the old one stays for runners of the version
    // before), and a turn's start also returns its run's answer (a replay of an answered run).
    "0007_volatile_ingress": Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(
        `ALTER TABLE ${prefix}_inbox ADD COLUMN shard text, ADD COLUMN generation bigint, ADD COLUMN answer text`
      )
      yield* sql.unsafe(
        `CREATE INDEX ${prefix}_inbox_unanswered ON ${prefix}_inbox (shard, id) WHERE answer IS NULL AND shard IS NOT NULL`
      )
      yield* sql.unsafe(`CREATE FUNCTION ${prefix}_coalesce_slot(
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
        $fn$`)
      yield* sql.unsafe(`CREATE OR REPLACE FUNCTION ${prefix}_turn_start(
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
        $fn$`)
    }),
    // A turn's start commits without waiting for its WAL flush (`synchronous_commit = off` for its own
    // transaction only): its one write, the slot's `started`, matters only once something after it is
    // durable, and every later commit that could depend on it (the turn's fenced commit, the next
    // message's slot) flushes the WAL up to its own record, so this one with it. A Postgres crash that loses
    // it loses no commit made after it: the slot is not started, the run is unanswered and replayed.
    // One fsync less on every turn's path (docs/cluster.md "Commits and durability").
    "0008_turn_start_async": Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql.unsafe(`CREATE OR REPLACE FUNCTION ${prefix}_turn_start(
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
        $fn$`)
    })
  })

/** Options of {@link migrate}. */
export interface MigrateOptions {
  /** switchyard's table prefix; default `switchyard`. */
  readonly prefix?: string
  /** effect/cluster's table prefix; default `cluster` (effect/cluster's own default). */
  readonly clusterPrefix?: string
  /** Also create effect/cluster's tables; default true. */
  readonly cluster?: boolean
}

/**
 * Creates what is missing of the schema, in one transaction under {@link SCHEMA_LOCK}; returns the
 * migrations it ran (`[]` when the schema was complete). Safe from many processes at once.
 */
export const migrate = (
  options: MigrateOptions = {}
): Effect.Effect<ReadonlyArray<string>, Migrator.MigrationError | SqlError, SqlClient.SqlClient> =>
  withSchemaLock(Effect.gen(function*() {
    const prefix = options.prefix ?? "switchyard"
    const clusterPrefix = options.clusterPrefix ?? "cluster"
    const run = Migrator.make({})
    const ran: Array<string> = []
    const record = (owner: string) => (done: ReadonlyArray<readonly [number, string]>) => {
      for (const [id, name] of done) ran.push(`${owner}:${String(id).padStart(4, "0")}_${name}`)
    }
    if (options.cluster !== false) {
      // The history tables are the ones effect/cluster's own layers use, so they find the work done.
      record(`${clusterPrefix}_messages`)(
        yield* run({
          loader: SqlMessageStorage.migrations({ prefix: clusterPrefix }),
          table: `${clusterPrefix}_migrations`
        })
      )
      record(`${clusterPrefix}_runners`)(
        yield* run({
          loader: SqlRunnerStorage.migrations({ prefix: clusterPrefix }),
          table: `${clusterPrefix}_runner_migrations`
        })
      )
    }
    record(prefix)(yield* run({ loader: switchyardMigrations(prefix), table: `${prefix}_migrations` }))
    return ran
  }))
