package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemkit-mcp/idemkit/internal/migrations"
)

// The schema's migrations, numbered NNN_name.up.sql and NNN_name.down.sql.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one numbered schema change.
type Migration = migrations.Migration

// Migrations returns the embedded migrations in version order, with the
// schema not yet filled in.
func Migrations() ([]Migration, error) {
	ms, err := migrations.Load(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	return ms, nil
}

const createMigrationsSQL = `CREATE TABLE IF NOT EXISTS idemkit_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL -- Unix nanoseconds
) STRICT`

// execQuerier is a *sql.DB, a *sql.Conn or a *sql.Tx.
type execQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// appliedVersions returns the versions recorded in idemkit_migrations
// (an error when the table is missing).
func appliedVersions(ctx context.Context, q execQuerier) (map[int]bool, error) {
	rows, err := q.QueryContext(ctx, `SELECT version FROM idemkit_migrations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied[v] = true
	}
	return applied, rows.Err()
}

func allApplied(ms []Migration, applied map[int]bool) bool {
	for _, m := range ms {
		if !applied[m.Version] {
			return false
		}
	}
	return true
}

// Migrate applies the embedded migrations the database lacks, in one
// transaction that takes the write lock at its start, so that processes
// migrating one file at once apply each migration exactly once. It is
// idempotent, and on a database that is already up to date it only reads
// (no write lock), so that processes opening a busy file do not queue for
// its write lock. ctx bounds the whole migration.
func (s *Store) Migrate(ctx context.Context) (err error) {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	if applied, aerr := appliedVersions(ctx, s.db); aerr == nil && allApplied(ms, applied) {
		return nil
	}
	if err := s.lock(ctx, startsWork); err != nil {
		return err
	}
	defer s.unlock()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return interpretError("migrate", err)
	}
	defer conn.Close()
	// BEGIN IMMEDIATE whatever the DSN's _txlock: a deferred transaction
	// whose first statements only read could not take the write lock later.
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return interpretError("migrate", err)
	}
	defer func() {
		if err != nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()
	if err := migrate(ctx, conn); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return interpretError("migrate", err)
	}
	return nil
}

// MigrateTx applies the embedded migrations the database lacks inside tx,
// for callers that migrate their own schema in the same transaction. The
// caller commits. Begin tx with BEGIN IMMEDIATE (DB() does) when other
// processes may migrate concurrently. ctx bounds the migration.
func (s *Store) MigrateTx(ctx context.Context, tx *sql.Tx) error {
	if tx == nil {
		return errors.New("sqlitestore: MigrateTx needs a *sql.Tx")
	}
	return migrate(ctx, tx)
}

func migrate(ctx context.Context, q execQuerier) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	return applyMigrations(ctx, q, ms)
}

// applyMigrations applies each of ms not yet recorded as applied, in
// order: a migration numbered below one already applied (a branch that
// shipped 005 before another's 004 was merged) is applied too.
func applyMigrations(ctx context.Context, q execQuerier, ms []Migration) error {
	if _, err := q.ExecContext(ctx, createMigrationsSQL); err != nil {
		return interpretError("migrate", err)
	}
	applied, err := appliedVersions(ctx, q)
	if err != nil {
		return interpretError("migrate", err)
	}
	for _, m := range ms {
		if applied[m.Version] {
			continue
		}
		if _, err := q.ExecContext(ctx, m.Up); err != nil {
			return interpretError(fmt.Sprintf("migrate: apply %03d_%s", m.Version, m.Name), err)
		}
		if _, err := q.ExecContext(ctx, `INSERT INTO idemkit_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)`,
			m.Version, m.Name, time.Now().UnixNano()); err != nil {
			return interpretError("migrate", err)
		}
	}
	return nil
}

// MigrateDownTx reverts the applied migrations above version target (0
// removes every idemkit table but the migrations table), newest first,
// inside the caller's transaction. ctx bounds it.
func (s *Store) MigrateDownTx(ctx context.Context, tx *sql.Tx, target int) error {
	if tx == nil {
		return errors.New("sqlitestore: MigrateDownTx needs a *sql.Tx")
	}
	return migrateDown(ctx, tx, target)
}

func migrateDown(ctx context.Context, q execQuerier, target int) error {
	ms, err := Migrations()
	if err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, createMigrationsSQL); err != nil {
		return interpretError("migrate down", err)
	}
	applied, err := appliedVersions(ctx, q)
	if err != nil {
		return interpretError("migrate down", err)
	}
	for _, m := range slices.Backward(ms) {
		if !applied[m.Version] || m.Version <= target {
			continue
		}
		if _, err := q.ExecContext(ctx, m.Down); err != nil {
			return interpretError(fmt.Sprintf("migrate down: revert %03d_%s", m.Version, m.Name), err)
		}
		if _, err := q.ExecContext(ctx, `DELETE FROM idemkit_migrations WHERE version = ?1`, m.Version); err != nil {
			return interpretError("migrate down", err)
		}
	}
	return nil
}

// Version returns the highest applied migration version, 0 when none. ctx
// bounds it.
func (s *Store) Version(ctx context.Context) (int, error) {
	var exists int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'idemkit_migrations'`).Scan(&exists); err != nil {
		return 0, interpretError("version", err)
	}
	if exists == 0 {
		return 0, nil
	}
	var v int
	if err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM idemkit_migrations`).Scan(&v); err != nil {
		return 0, interpretError("version", err)
	}
	return v, nil
}
