ALTER TABLE reviewers DROP COLUMN auth_generation;
