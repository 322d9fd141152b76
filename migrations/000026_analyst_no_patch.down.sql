-- Back to 000025's row: llm_calls without reply and stripped only.
UPDATE analyst_grants
SET withheld = '{reply,stripped}',
    why = 'read by repair_effectiveness_in: tokens, cost, latency, model, versions; '
        'not reply or stripped, the model''s words, which quote the customer'
WHERE relation = 'llm_calls';
