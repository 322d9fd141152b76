-- Text search over the triage queue (docs/triage.md, "Search"): an
-- expression GIN index over the messages' text, read with the 'simple'
-- text search configuration, which lower-cases and splits words but
-- stems nothing and drops no stop word, so it works alike for every
-- language. Only the first 100000 characters are indexed: a tsvector
-- holds at most 1 MB, and a longer text must not fail its ingest.
--
-- The index is derived from messages.body, which an erasure blanks
-- (store.Erasure): the erased text's entries stop matching at the
-- erasure's commit, and VACUUM removes them from the index pages with
-- the row versions that held the text.
--
-- store.triageSearchSQL is this expression, word for word, so that the
-- planner uses the index.
CREATE INDEX messages_body_search_idx ON messages
    USING gin (to_tsvector('simple'::regconfig, left(body, 100000)));
