package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The schema's migrations, numbered NNN_name.up.sql and NNN_name.down.sql.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one numbered schema change.
type migration struct {
	version  int
	name     string
	up, down string
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.up.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, n := range names {
		base := strings.TrimSuffix(path.Base(n), ".up.sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("sqlitestore: migration file %s is not named NNN_name.up.sql", n)
		}
		up, err := migrationFiles.ReadFile(n)
		if err != nil {
			return nil, err
		}
		down, err := migrationFiles.ReadFile(strings.TrimSuffix(n, ".up.sql") + ".down.sql")
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: migration %s has no .down.sql: %w", n, err)
		}
		ms = append(ms, migration{version: v, name: name, up: string(up), down: string(down)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("sqlitestore: two migrations numbered %03d", ms[i].version)
		}
	}
	return ms, nil
}

const createMigrationsSQL = `CREATE TABLE IF NOT EXISTS idemkit_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL -- Unix nanoseconds
) STRICT`

// execQuerier is a *sql.Conn or a *sql.Tx.
type execQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Migrate applies the embedded migrations the database lacks, in one
// transaction that takes the write lock at its start, so that processes
// migrating one file at once apply each migration exactly once. It is
// idempotent. ctx bounds the whole migration.
func (s *Store) Migrate(ctx context.Context) (err error) {
	if err := s.lock(ctx); err != nil {
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
	ms, err := migrations()
	if err != nil {
		return err
	}
	if _, err := q.ExecContext(ctx, createMigrationsSQL); err != nil {
		return interpretError("migrate", err)
	}
	var current int
	if err := q.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM idemkit_migrations`).Scan(&current); err != nil {
		return interpretError("migrate", err)
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		if _, err := q.ExecContext(ctx, m.up); err != nil {
			return interpretError(fmt.Sprintf("migrate: apply %03d_%s", m.version, m.name), err)
		}
		if _, err := q.ExecContext(ctx, `INSERT INTO idemkit_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)`,
			m.version, m.name, time.Now().UnixNano()); err != nil {
			return interpretError("migrate", err)
		}
	}
	return nil
}

// migrateDown reverts the applied migrations above version to, newest
// first, inside q's transaction.
func migrateDown(ctx context.Context, q execQuerier, to int) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	var current int
	if err := q.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM idemkit_migrations`).Scan(&current); err != nil {
		return interpretError("migrate down", err)
	}
	for _, m := range slices.Backward(ms) {
		if m.version > current || m.version <= to {
			continue
		}
		if _, err := q.ExecContext(ctx, m.down); err != nil {
			return interpretError(fmt.Sprintf("migrate down: revert %03d_%s", m.version, m.name), err)
		}
		if _, err := q.ExecContext(ctx, `DELETE FROM idemkit_migrations WHERE version = ?1`, m.version); err != nil {
			return interpretError("migrate down", err)
		}
	}
	return nil
}
