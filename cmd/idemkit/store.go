package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
)

// storeKind is the kind of store a --store URL names.
type storeKind string

const (
	kindMemory   storeKind = "memory"
	kindSQLite   storeKind = "sqlite"
	kindPostgres storeKind = "postgres"
)

// storeURL is a parsed --store value.
type storeURL struct {
	kind storeKind
	// target is the SQLite path or the Postgres DSN.
	target string
}

// storeHelp documents the --store flag.
const storeHelp = `where idempotency records live: memory (this process only), sqlite:PATH
(one machine), postgres:DSN or a postgres:// URL (shared by replicas)`

// parseStoreURL parses a --store value. Its errors never repeat a DSN,
// which may hold a password.
func parseStoreURL(s string) (storeURL, error) {
	switch {
	case s == "":
		return storeURL{}, usagef("--store is required: memory, sqlite:PATH or postgres:DSN")
	case s == "memory" || s == "memory:":
		return storeURL{kind: kindMemory}, nil
	case strings.HasPrefix(s, "sqlite:"):
		path := strings.TrimPrefix(strings.TrimPrefix(s, "sqlite:"), "//")
		if path == "" {
			return storeURL{}, usagef("--store sqlite: needs a file path, for example sqlite:/var/lib/idemkit/idemkit.db")
		}
		return storeURL{kind: kindSQLite, target: path}, nil
	case strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://"):
		return storeURL{kind: kindPostgres, target: s}, nil
	case strings.HasPrefix(s, "postgres:") || strings.HasPrefix(s, "postgresql:"):
		_, dsn, _ := strings.Cut(s, ":")
		if strings.TrimSpace(dsn) == "" {
			return storeURL{}, usagef("--store postgres: needs a DSN, for example postgres://idemkit@db.internal:5432/idemkit")
		}
		return storeURL{kind: kindPostgres, target: dsn}, nil
	}
	kind, _, ok := strings.Cut(s, ":")
	if !ok {
		kind = s
	}
	if len(kind) > 20 {
		kind = kind[:20] + "…"
	}
	return storeURL{}, usagef("--store: unknown store %q: use memory, sqlite:PATH or postgres:DSN", kind)
}

// String describes the store without its credentials.
func (u storeURL) String() string {
	switch u.kind {
	case kindSQLite:
		return "sqlite:" + u.target
	case kindPostgres:
		if cfg, err := pgxpool.ParseConfig(u.target); err == nil {
			c := cfg.ConnConfig
			return fmt.Sprintf("postgres://%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
		}
		return "postgres"
	}
	return string(u.kind)
}

// openedStore is a store opened from a --store URL.
type openedStore struct {
	idemstore.Store
	url storeURL
	// migrate applies the pending migrations and returns the version.
	migrate func(ctx context.Context) (int, error)
	// version returns the schema version (0: none).
	version func(ctx context.Context) (int, error)
	// latest is the version the embedded migrations reach.
	latest int
	close  func()
}

// Close releases the store.
func (s *openedStore) Close() {
	if s.close != nil {
		s.close()
	}
}

// openOptions tune openStore.
type openOptions struct {
	// migrate applies pending migrations on open.
	migrate bool
}

// openStore opens the store a --store URL names. The SQL stores are not
// migrated unless opts.migrate; call requireSchema to check.
func openStore(ctx context.Context, raw string, opts openOptions) (*openedStore, error) {
	u, err := parseStoreURL(raw)
	if err != nil {
		return nil, err
	}
	switch u.kind {
	case kindMemory:
		return &openedStore{Store: &idemkit.MemoryStore{}, url: u}, nil
	case kindSQLite:
		st, err := sqlitestore.Open(ctx, u.target, &sqlitestore.Config{NoMigrate: !opts.migrate})
		if err != nil {
			return nil, fmt.Errorf("open the SQLite store %s: %w", u.target, err)
		}
		ms, err := sqlitestore.Migrations()
		if err != nil {
			st.Close()
			return nil, err
		}
		return &openedStore{
			Store: st, url: u,
			migrate: func(ctx context.Context) (int, error) {
				if err := st.Migrate(ctx); err != nil {
					return 0, err
				}
				return st.Version(ctx)
			},
			version: st.Version,
			latest:  ms[len(ms)-1].Version,
			close:   func() { _ = st.Close() },
		}, nil
	case kindPostgres:
		cfg, err := pgxpool.ParseConfig(u.target)
		if err != nil {
			return nil, usagef("--store: the Postgres DSN cannot be parsed (%v); use postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE or a key=value DSN", redactDSNError(err))
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("connect to the Postgres store %s: %w", u, err)
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("connect to the Postgres store %s: %w", u, err)
		}
		st, err := pgstore.New(pool, nil)
		if err != nil {
			pool.Close()
			return nil, err
		}
		ms, err := pgstore.Migrations()
		if err != nil {
			pool.Close()
			return nil, err
		}
		o := &openedStore{
			Store: st, url: u,
			migrate: func(ctx context.Context) (int, error) {
				if err := st.Migrate(ctx); err != nil {
					return 0, err
				}
				return st.Version(ctx)
			},
			version: func(ctx context.Context) (int, error) {
				v, err := st.Version(ctx)
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: never migrated
					return 0, nil
				}
				return v, err
			},
			latest: ms[len(ms)-1].Version,
			close:  pool.Close,
		}
		if opts.migrate {
			if _, err := o.migrate(ctx); err != nil {
				pool.Close()
				return nil, err
			}
		}
		return o, nil
	}
	return nil, fmt.Errorf("unknown store kind %q", u.kind)
}

// requireSchema fails unless the store's schema is at the version this
// binary's migrations reach, with an error that says what to run.
func (s *openedStore) requireSchema(ctx context.Context) error {
	if s.version == nil {
		return nil
	}
	v, err := s.version(ctx)
	if err != nil {
		return fmt.Errorf("read the schema version of the %s store: %w", s.url, err)
	}
	switch {
	case v < s.latest:
		return fmt.Errorf("the %s store's schema is at version %d, this idemkit needs %d: run `idemkit migrate --store …` with the same --store first", s.url, v, s.latest)
	case v > s.latest:
		return fmt.Errorf("the %s store's schema is at version %d, newer than this idemkit knows (%d): upgrade idemkit", s.url, v, s.latest)
	}
	return nil
}

// redactDSNError keeps a DSN parse error from echoing a password.
func redactDSNError(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "password"); i >= 0 {
		return errors.New("invalid DSN")
	}
	if strings.Contains(msg, "@") {
		return errors.New("invalid DSN")
	}
	return err
}
