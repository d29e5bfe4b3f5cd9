-- title: agent sources: request keys and disjoint buckets
-- description: macros shared by the parsers of Codex, Gemini CLI and GenAI spans (created in a
--   parser's private in-memory connection, never in the warehouse). A Codex or Gemini request
--   is seen by several sources (OTLP events, trace spans, rollout files or chat logs) and none
--   of them carries an id all the others carry, so its key is a hash of the session and its
--   token counts as the API reported them: every source of one request computes the same key
--   and the warehouse merge keeps one row. Two requests of one session with identical counts
--   are taken to be one (in an append-only conversation the prompt grows, so they never are;
--   a client writing one request twice, as some Codex versions do, is exactly that case).

-- Codex: the Responses API counts, input including cached and written tokens.
CREATE OR REPLACE MACRO codex_request_key(session, input, cached, written, output, reasoning) AS
    'codex:' || md5(concat_ws('|', coalesce(session, ''), coalesce(input, 0), coalesce(cached, 0),
                              coalesce(written, 0), coalesce(output, 0), coalesce(reasoning, 0)));

-- Gemini: usageMetadata counts, prompt including cached.
CREATE OR REPLACE MACRO gemini_request_key(session, prompt, cached, output, thoughts, tool) AS
    'gemini:' || md5(concat_ws('|', coalesce(session, ''), coalesce(prompt, 0), coalesce(cached, 0),
                               coalesce(output, 0), coalesce(thoughts, 0), coalesce(tool, 0)));

-- Uncached input from a total that includes the cached (and written) tokens, clipped at 0. A
-- negative difference means the source did not count them inside its total after all; the
-- parsers report each clip (see agent_clip_note).
CREATE OR REPLACE MACRO agent_uncached(total, cached, written) AS
    greatest(coalesce(total, 0) - coalesce(cached, 0) - coalesce(written, 0), 0);

CREATE OR REPLACE MACRO agent_clipped(total, cached, written) AS
    coalesce(total, 0) - coalesce(cached, 0) - coalesce(written, 0) < 0;

CREATE OR REPLACE MACRO agent_clip_note(total_name, total, parts) AS
    total_name || ' ' || coalesce(total, 0) || ' is less than ' || parts
    || ': uncached input stored as 0 (the row is kept; does this source count cached tokens inside input?)';
