-- The analyst role read llm_calls.patch: a repair's JSON Patch carries the
-- values the model put in the record ({"op": "replace", "path":
-- "/items/0/problem", "value": "stain"}), taken from the customer's text,
-- and erasure blanks it with the replies (store/erase.go). 000015 withheld
-- only reply and stripped. Withhold patch too, and take back what was
-- granted on llm_calls: REVOKE on a table also revokes its column
-- privileges (PostgreSQL, REVOKE), and the analyst_grants trigger grants
-- the other columns again. A role granted by hand (SELECT analyst_grant(…))
-- takes the same REVOKE and analyst_grant by hand.
UPDATE analyst_grants
SET withheld = '{reply,stripped,patch}',
    why = 'read by repair_effectiveness_in: tokens, cost, latency, model, versions; '
        'not reply, stripped or patch, the model''s words and values, which quote the customer'
WHERE relation = 'llm_calls';

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'extractq_analyst') THEN
        REVOKE SELECT ON llm_calls FROM extractq_analyst;
        PERFORM analyst_grant('extractq_analyst');
    END IF;
END;
$$;
