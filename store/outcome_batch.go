package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// RunOutcomeInsertMany writes several runs' outcomes in one transaction on
// the pool, each inside its own savepoint, so one run's failure (such as
// ErrOutcomeExists for a run another delivery finished) does not undo the
// others. It returns one error per params, in order: nil for an outcome
// committed. If the transaction itself fails, every outcome gets that
// error and none is written.
func (s *Store) RunOutcomeInsertMany(ctx context.Context, params []RunOutcomeParams) []error {
	errs := make([]error, len(params))
	txErr := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		for i, p := range params {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return fmt.Errorf("savepoint %d: %w", i, err)
			}
			if err := s.RunOutcomeInsert(ctx, sp, p); err != nil {
				errs[i] = err
				if rbErr := sp.Rollback(ctx); rbErr != nil {
					return fmt.Errorf("rollback to savepoint %d: %w", i, rbErr)
				}
				continue
			}
			if err := sp.Commit(ctx); err != nil {
				return fmt.Errorf("release savepoint %d: %w", i, err)
			}
		}
		return nil
	})
	if txErr != nil {
		txErr = fmt.Errorf("store.RunOutcomeInsertMany(%d outcomes): %w", len(params), interpretError(txErr))
		for i := range errs {
			errs[i] = txErr
		}
	}
	return errs
}
