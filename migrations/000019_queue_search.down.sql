DROP INDEX IF EXISTS messages_body_search_idx;
