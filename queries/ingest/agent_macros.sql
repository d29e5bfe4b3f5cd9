-- title: agent sources: request keys and disjoint buckets
-- description: macros shared by the parsers of Codex, Gemini CLI and GenAI spans (created in a
--   parser's private in-memory connection, never in the warehouse). A Codex or Gemini request
--   is seen by several sources (OTLP events, trace spans, rollout files or chat logs) and none
--   of them carries an id all the others carry, so its key is a hash of the session and its
--   token counts as the API reported them: every source of one request computes the same key
--   and the warehouse merge keeps one row. A source that can tell two responses of one session
--   with identical counts apart (rollout files and chat logs: by position and message id) passes
--   ``nth``, how many earlier responses of the session had the same counts; the first keeps the
--   plain key, so it still meets its copy from a source that cannot (OTLP events).

-- Codex: the Responses API counts, input including cached and written tokens.
CREATE OR REPLACE MACRO codex_request_key(session, input, cached, written, output, reasoning, nth := 0) AS
    'codex:' || md5(concat_ws('|', coalesce(session, ''), coalesce(input, 0), coalesce(cached, 0),
                              coalesce(written, 0), coalesce(output, 0), coalesce(reasoning, 0),
                              nullif(nth, 0)));

-- Gemini: usageMetadata counts, prompt including cached.
CREATE OR REPLACE MACRO gemini_request_key(session, prompt, cached, output, thoughts, tool, nth := 0) AS
    'gemini:' || md5(concat_ws('|', coalesce(session, ''), coalesce(prompt, 0), coalesce(cached, 0),
                               coalesce(output, 0), coalesce(thoughts, 0), coalesce(tool, 0),
                               nullif(nth, 0)));

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

-- OTLP log records read by otlp_agents_logs (and left out of otlp_logs): the events of Codex and
-- the Gemini CLI. (GenAI semantic-convention events, such as the copy of each Gemini response in
-- gen_ai.client.inference.operation.details, carry no cache counts: otlp_logs counts them.)
CREATE OR REPLACE MACRO otlp_agent_event(name) AS
    coalesce(starts_with(name, 'codex.') OR starts_with(name, 'gemini_cli.'), false);

-- The agent a resource's service.name names (spans of known agents count as that agent).
CREATE OR REPLACE MACRO agent_of_service(service) AS
    CASE WHEN starts_with(lower(service), 'codex') THEN 'codex'
         WHEN starts_with(lower(service), 'gemini-cli') OR starts_with(lower(service), 'gemini_cli') THEN 'gemini-cli'
    END;

-- OTLP spans read by otlp_genai_spans (and left out of otlp_spans): spans with token usage in
-- any convention's spelling, except Claude Code's own (read by the Claude Code rules).
CREATE OR REPLACE MACRO otlp_usage_span(name, keys) AS
    NOT starts_with(coalesce(name, ''), 'claude_code.') AND list_has_any(keys, [
        'gen_ai.usage.input_tokens', 'gen_ai.usage.output_tokens',
        'gen_ai.usage.prompt_tokens', 'gen_ai.usage.completion_tokens',
        'llm.usage.prompt_tokens', 'llm.usage.completion_tokens',
        'llm.token_count.prompt', 'llm.token_count.completion']);

-- OTLP metrics read by otlp_agents_metrics (and left out of otlp_metrics).
CREATE OR REPLACE MACRO otlp_agent_metric(name) AS
    coalesce(name IN ('codex.turn.token_usage', 'gemini_cli.token.usage'), false);

-- (the attributes column and series keys of these records use otlp_members, otlp_attributes
-- and otlp_attrs_key from otlp_macros.sql)
