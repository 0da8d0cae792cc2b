/**
 * Migration `0009_slot_start`: the ingress's slot statement starts the run of an idle session itself.
 *
 * `<prefix>_coalesce_slot_start` is `<prefix>_coalesce_slot` (0007's overload: slot, inbox row with shard
 * and generation, a re-sent message id joins its run) plus one case: when it opens a new slot for a
 * session that has no unanswered inbox row in its shard (no run of it waits, runs or awaits a replay),
 * the slot is opened already started and the statement also returns the session's last `p_history`
 * transcript rows (JSON `[[role, content], ...]`, oldest first). Nothing can join that run (the slot is
 * started under the row lock that every slot statement takes), so its messages are the one just
 * recorded, and the history is complete (every earlier run of the session committed its exchange with
 * its answer, in one statement). The key's runner then runs the turn from what the RunNow carries,
 * without `<prefix>_turn_start`: one statement fewer in series (docs/cluster.md "What a message costs").
 * Otherwise it is 0007's function and returns NULL history: the turn starts as before.
 */
export const slotStartSql = (prefix: string): ReadonlyArray<string> => [
  `CREATE FUNCTION ${prefix}_coalesce_slot_start(
          p_lane text, p_key text, p_session text, p_message_id text, p_text text, p_now bigint,
          p_shard text, p_generation bigint, p_history integer)
        RETURNS TABLE (out_slot bigint, out_joined boolean, out_run_id text, out_history text)
        LANGUAGE plpgsql VOLATILE AS $fn$
        DECLARE
          v_slot bigint;
          v_started boolean;
          v_idle boolean := false;
          v_known text;
          v_run text;
          v_history text;
        BEGIN
          IF p_message_id IS NOT NULL THEN
            SELECT i.run_id INTO v_known FROM ${prefix}_inbox i WHERE i.session = p_session AND i.message_id = p_message_id;
            IF v_known IS NOT NULL THEN
              RETURN QUERY SELECT NULL::bigint, true, v_known, NULL::text;
              RETURN;
            END IF;
          END IF;
          INSERT INTO ${prefix}_coalesce (lane, key, slot, started) VALUES (p_lane, p_key, 0, true)
            ON CONFLICT (lane, key) DO NOTHING;
          SELECT c.slot, c.started INTO v_slot, v_started FROM ${prefix}_coalesce c
            WHERE c.lane = p_lane AND c.key = p_key FOR UPDATE;
          IF v_started THEN
            v_idle := NOT EXISTS (SELECT 1 FROM ${prefix}_inbox u
              WHERE u.shard = p_shard AND u.answer IS NULL AND u.session = p_session);
            v_slot := v_slot + 1;
            UPDATE ${prefix}_coalesce c SET slot = v_slot, started = v_idle WHERE c.lane = p_lane AND c.key = p_key;
          END IF;
          v_run := 'coalesce:' || p_lane || ':' || p_key || ':' || v_slot;
          INSERT INTO ${prefix}_inbox (session, message_id, text, run_id, received_at, shard, generation)
            VALUES (p_session, p_message_id, p_text, v_run, p_now, p_shard, p_generation)
            ON CONFLICT (session, message_id) DO NOTHING;
          IF NOT FOUND THEN
            SELECT i.run_id INTO v_known FROM ${prefix}_inbox i WHERE i.session = p_session AND i.message_id = p_message_id;
            RETURN QUERY SELECT NULL::bigint, true, v_known, NULL::text;
            RETURN;
          END IF;
          IF v_idle THEN
            SELECT coalesce(json_agg(json_build_array(t.role, t.content) ORDER BY t.id), '[]'::json)::text
              INTO v_history FROM (
                SELECT h.id, h.role, h.content FROM ${prefix}_transcripts h WHERE h.session = p_session
                ORDER BY h.id DESC LIMIT p_history) t;
          END IF;
          RETURN QUERY SELECT v_slot, NOT v_started, v_run, v_history;
        END
        $fn$`
]
