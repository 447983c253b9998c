package pgstore

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/idemkit-mcp/idemkit/internal/migrations"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one numbered schema change.
type Migration = migrations.Migration

// Migrations returns the embedded migrations in version order, with the
// schema not yet filled in.
func Migrations() ([]Migration, error) {
	ms, err := migrations.Load(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	return ms, nil
}

// migrateLockID serialises concurrent Migrate calls from many replicas.
const migrateLockID = 0x1de3_c17_0001

// Migrate applies the migrations not yet applied, in one transaction. It is
// safe to call from many replicas at once and on every start: a database
// already up to date is left alone. It creates Config.Schema when missing.
func (s *Store) Migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return s.MigrateTx(ctx, tx) })
}

// MigrateTx is Migrate inside the caller's transaction, so that idemkit's
// tables can ship with the application's own migrations.
func (s *Store) MigrateTx(ctx context.Context, tx pgx.Tx) error {
	migrations, err := Migrations()
	if err != nil {
		return err
	}
	applied, err := s.prepareMigrations(ctx, tx)
	if err != nil {
		return err
	}
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		if _, err := tx.Exec(ctx, s.fill(m.Up)); err != nil {
			return fmt.Errorf("pgstore: migration %03d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+s.sql.prefix+"idemkit_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			return fmt.Errorf("pgstore: record migration %03d: %w", m.Version, err)
		}
	}
	return nil
}

// MigrateDownTx reverts applied migrations above version target (0 removes
// every idemkit table but the migrations table) inside the caller's
// transaction.
func (s *Store) MigrateDownTx(ctx context.Context, tx pgx.Tx, target int) error {
	migrations, err := Migrations()
	if err != nil {
		return err
	}
	applied, err := s.prepareMigrations(ctx, tx)
	if err != nil {
		return err
	}
	for i := len(migrations) - 1; i >= 0; i-- {
		m := migrations[i]
		if m.Version <= target || !applied[m.Version] {
			continue
		}
		if _, err := tx.Exec(ctx, s.fill(m.Down)); err != nil {
			return fmt.Errorf("pgstore: revert migration %03d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+s.sql.prefix+"idemkit_migrations WHERE version = $1", m.Version); err != nil {
			return err
		}
	}
	return nil
}

// prepareMigrations takes the migration lock, makes the schema and the
// migrations table when missing, and returns the applied versions.
func (s *Store) prepareMigrations(ctx context.Context, tx pgx.Tx) (map[int]bool, error) {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrateLockID)); err != nil {
		return nil, fmt.Errorf("pgstore: migration lock: %w", err)
	}
	if s.sql.schema != "" {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{s.sql.schema}.Sanitize()); err != nil {
			return nil, fmt.Errorf("pgstore: create schema %q: %w", s.sql.schema, err)
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.sql.prefix+`idemkit_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("pgstore: create migrations table: %w", err)
	}
	rows, err := tx.Query(ctx, "SELECT version FROM "+s.sql.prefix+"idemkit_migrations")
	if err != nil {
		return nil, err
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[int(v)] = true
	}
	return applied, nil
}

func (s *Store) fill(sql string) string {
	return strings.ReplaceAll(sql, "{schema}", s.sql.prefix)
}

// Version returns the highest applied migration version, 0 when none.
func (s *Store) Version(ctx context.Context) (int, error) {
	var v *int32
	err := s.db.QueryRow(ctx, "SELECT max(version) FROM "+s.sql.prefix+"idemkit_migrations").Scan(&v)
	if err != nil {
		return 0, s.translate("version", err)
	}
	if v == nil {
		return 0, nil
	}
	return int(*v), nil
}
