package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/idemkit-mcp/idemkit/internal/hashkey"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/propagation"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/gateway"
	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/gatewayconfig"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// gatewayFlags are the flags of `idemkit gateway`.
type gatewayFlags struct {
	listen        string
	upstream      string
	stdio         bool
	store         string
	migrate       bool
	subjectHeader string
	otlpEndpoint  string
	serviceName   string
	window        time.Duration
	lease         time.Duration
	protect       []string
	bypass        []string
	logLevel      string
	readyFile     string
	maxMessage    int
	sweepEvery    time.Duration
	maxUp         int
	maxUpSubject  int
	sessionIdle   time.Duration
	readTimeout   time.Duration
	idleTimeout   time.Duration
	hashKeyFile   string
	config        string
	// callStatusFlag is --call-status-tool; callStatus the name resolved
	// with the file ("" for none).
	callStatusFlag string
	callStatus     string
	shareUpstream  string

	file *gatewayconfig.File // --config, once loaded
}

// DefaultIdleTimeout is how long the gateway keeps an idle keep-alive
// connection without --idle-timeout.
const DefaultIdleTimeout = 2 * time.Minute

// DefaultListen is the address the gateway listens on without --listen.
const DefaultListen = "127.0.0.1:8787"

func newGatewayCmd() *cobra.Command {
	var f gatewayFlags
	c := &cobra.Command{
		Use:   "gateway --store URL (--upstream URL | -- COMMAND [ARGS...])",
		Short: "Protect any MCP server: claim-and-replay and spans in front of it",
		Long: `gateway serves MCP in front of an unmodified MCP server, in any language, and
makes its write tools safe to retry: a repeated identical call (same caller,
tool and arguments, or the same idempotency_key) is answered with the first
call's result instead of running twice; a repeat while the first still runs
is told so. Every request gets a SERVER span and the MCP metrics, the same as
idemkit's Go middleware emits, for the Collector's dup processor and the
dashboards.

Upstreams:
  --upstream http://HOST:PORT/mcp   a Streamable HTTP server
  -- COMMAND [ARGS...]              a stdio server, started once per session

The gateway serves Streamable HTTP at http://LISTEN/mcp, or, with --stdio,
one client over its own stdin and stdout (for clients that launch servers).

Which tools are protected: those the upstream's tools/list does not annotate
readOnlyHint or idempotentHint (MCP's defaults make an unannotated tool a
write tool); --protect and --bypass override. Protected tools advertise an
optional idempotency_key argument, which the gateway strips before
forwarding.

A status tool for every slow call: the gateway adds a read-only tool,
idemkit_call_status (--call-status-tool NAME renames it, - switches it
off), to the server's tools. Given a tool and the same arguments (or the
call's idempotency_key as key), it answers the caller's own record of that call without
running anything: in progress (with the last progress and when to ask
again), completed (the stored result, replayed), released, or unknown.
In-progress answers name it for tools without a status tool of their own.

Tasks: when the server advertises MCP tasks, a task-augmented call of a
protected tool is a task the gateway keeps in its store (the server's own
task is followed to its end on its session): its duplicate on a new
session gets the same task back, and tasks/get, tasks/result,
tasks/cancel and tasks/list answer for it on any session of the same
caller, and after a restart on a durable store.

Who the caller is: the --subject-header value (default Authorization: the
scheme and the SHA-256 of the credential after it, "bearer:<hex>", never
the credential itself; Basic and any other scheme alike, each its own
namespace). Two callers never share a result. An Authorization value with
no credential (empty, white space, or a scheme alone such as "Bearer",
which is what "Bearer " with an unset token arrives as) names no one. A
request that carries the subject header more than once (a proxy that
appends instead of replacing) gets HTTP 400: the gateway cannot tell
which one counts. Over HTTP, a protected call without a subject is
refused, never run unprotected (and tools/list then offers it no
idempotency_key); on --stdio the process serves one client. --subject-header - scopes calls by
the gateway's own session instead (its IDs are random and only those it
issued are accepted), which catches retries within a session but not a
call replayed on a new session.

Per-tool settings: --config FILE reads a YAML file with, per tool, the
settings idemkit's Go middleware has (window, lease, wait, failure_policy,
status_tool, exclude, round, protect, require_key, version, max_attempts) and
defaults for every tool:

  defaults: {window: 10m, lease: 2m, failure_policy: release}
  tools:
    issue_refund: {window: 30m, exclude: [/order/requested_at], round: {/sent_at: 1m}}
    charge_card:  {failure_policy: store}
    search:       {protect: false}

The file is checked whole at start: an unknown setting, a bad value or a
contradiction stops the gateway with the file, line and setting. A setting
that a flag gives too (--window and defaults.window, --protect X and
tools.X.protect) is an error; the flags stay for the simple cases.

Authentication is the upstream's: its HTTP 401 and 403 reach the client as
they are, WWW-Authenticate included (MCP's OAuth discovery). An answer from
the gateway's records (a replay, an in-progress answer) is given only after
the upstream accepted the caller's headers for a ping on its session, so a
revoked token gets no replay.

Limits: a stdio server runs one process per HTTP session, started when an
identified caller's initialize arrives (with a subject header configured,
an initialize without one gets HTTP 401 and starts nothing), at most
--max-upstreams at once (default 32 for a stdio server, 1024 for an HTTP
one; beyond: 503) and --max-upstreams-per-subject per caller (default 4,
or 64; beyond: 429). A session unused for --session-idle-timeout (default
5m; no request, no open stream) is closed with its process: the TypeScript
SDK's Client.close() sends no DELETE. --share-upstream subject runs one
process per caller instead, shared by the caller's sessions (then
--max-upstreams counts processes, --max-upstreams-per-subject sessions):
only for a server that keeps no per-session state, since it sees one
client (the first session's capabilities; a logging level, subscriptions,
roots or state one session sets are every session's). --read-timeout (10s) bounds reading
a request's headers and its body, --idle-timeout (2m) an idle keep-alive
connection, --max-message-bytes (16 MiB) one message.

What the spans reveal: no arguments, results, subjects or credentials;
idemkit.args.hash, idemkit.key.hash and idemkit.subject.hash are hashes of
them, and mcp.session.id is a hash of the gateway's session ID (which, with
--subject-header -, is the credential that reaches a session's results).
Without --hash-key-file those hashes are plain SHA-256: anyone who reads the
spans can hash guessed arguments (an order ID and an amount) and confirm
them. --hash-key-file makes every one an HMAC-SHA-256 under a deployment
key; give every replica the same file, so that the Collector still groups
their duplicates. The key never changes what the store keeps. An upstream
answer the gateway cannot read is reported by its size, never its bytes.`,
		Example: `  idemkit gateway --listen 127.0.0.1:8787 --upstream http://127.0.0.1:3000/mcp --store sqlite:idemkit.db
  idemkit gateway --listen 127.0.0.1:8787 --store sqlite:idemkit.db -- node build/server.js
  idemkit gateway --stdio --store sqlite:idemkit.db -- python -m my_server
  idemkit gateway --upstream http://api:3000/mcp --store postgres://idemkit@db/idemkit \
      --otlp-endpoint 127.0.0.1:4317 --window 15m --protect send_email --bypass search
  idemkit gateway --upstream http://127.0.0.1:3000/mcp --store sqlite:idemkit.db --config gateway.yaml`,
		RunE: func(c *cobra.Command, args []string) error {
			var command []string
			if at := c.ArgsLenAtDash(); at >= 0 {
				if at > 0 {
					return usagef("unexpected arguments %q before --: the stdio server's command goes after --", args[:at])
				}
				command = args
			} else if len(args) > 0 {
				return usagef("unexpected arguments %q: to run a stdio server, put its command after --, as in: idemkit gateway --store memory -- node server.js", args)
			}
			return runGateway(c.Context(), c.ErrOrStderr(), c.InOrStdin(), c.OutOrStdout(), c.Flags().Changed, f, command)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.listen, "listen", DefaultListen, "the address to serve Streamable HTTP on (at /mcp)")
	fl.StringVar(&f.upstream, "upstream", "", "the Streamable HTTP MCP server to protect, for example http://127.0.0.1:3000/mcp")
	fl.BoolVar(&f.stdio, "stdio", false, "serve one client over stdin/stdout instead of HTTP (the upstream is the command after --)")
	fl.StringVar(&f.store, "store", "", storeHelp)
	fl.BoolVar(&f.migrate, "migrate", false, "apply pending migrations to a Postgres store on start (SQLite stores are always migrated)")
	fl.StringVar(&f.subjectHeader, "subject-header", gateway.DefaultSubjectHeader, "the request header that identifies the caller (Authorization: the credential's hash, by scheme; -: none, calls are scoped by session)")
	fl.StringVar(&f.otlpEndpoint, "otlp-endpoint", "", otlpEndpointHelp)
	fl.StringVar(&f.serviceName, "service-name", "idemkit-gateway", "the service.name of the gateway's spans and metrics")
	fl.DurationVar(&f.window, "window", idemkit.DefaultWindow, "how long a completed call's result answers its duplicates")
	fl.DurationVar(&f.lease, "lease", idemkit.DefaultLease, "how long a running call holds its key without progress before a duplicate may take it over")
	fl.StringSliceVar(&f.protect, "protect", nil, "tools to protect whatever their annotations say (repeat or comma-separate)")
	fl.StringSliceVar(&f.bypass, "bypass", nil, "tools never to protect whatever their annotations say (repeat or comma-separate)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error (logs go to stderr)")
	fl.IntVar(&f.maxMessage, "max-message-bytes", gateway.DefaultMaxMessageBytes, "the largest JSON-RPC message read from a client (larger: HTTP 413) or from the upstream, and the largest result kept (a call whose answer is larger is recorded as done, its result not kept: retries are told so, never run again)")
	fl.IntVar(&f.maxUp, "max-upstreams", 0, fmt.Sprintf("the most upstream sessions open at once over HTTP, each a process for a stdio server (0: %d for a stdio server, %d for an HTTP one); an initialize beyond it gets HTTP 503",
		gateway.DefaultMaxStdioUpstreams, gateway.DefaultMaxHTTPUpstreams))
	fl.IntVar(&f.maxUpSubject, "max-upstreams-per-subject", 0, fmt.Sprintf("the most upstream sessions one caller may have open (0: %d for a stdio server, %d for an HTTP one); an initialize beyond it gets HTTP 429",
		gateway.DefaultMaxStdioUpstreamsPerSubject, gateway.DefaultMaxHTTPUpstreamsPerSubject))
	fl.DurationVar(&f.sessionIdle, "session-idle-timeout", gateway.DefaultSessionIdleTimeout, "close a session (and its upstream session or process) unused this long: no request, no open stream")
	fl.DurationVar(&f.readTimeout, "read-timeout", gateway.DefaultReadTimeout, "how long a client may take to send a request's headers, and again its body (slower: the connection is closed, or HTTP 408)")
	fl.DurationVar(&f.idleTimeout, "idle-timeout", DefaultIdleTimeout, "how long an idle keep-alive connection is kept open between requests")
	fl.DurationVar(&f.sweepEvery, "sweep-interval", time.Minute, "how often the gateway deletes the store's expired records (0: never, for a SQLite or Postgres store swept by 'idemkit sweep' from cron; a memory store is always swept)")
	fl.StringVar(&f.config, "config", "", configHelp)
	fl.StringVar(&f.shareUpstream, "share-upstream", "session", "how a stdio server's processes are shared: session (one per session) or subject (one per caller, shared by the caller's sessions: only for a server that keeps no per-session state)")
	fl.StringVar(&f.callStatusFlag, "call-status-tool", gatewayconfig.DefaultCallStatusTool, "the name of the gateway's read-only call status tool, which answers a caller's own record of a call (in progress, completed with its result, released, unknown) and which in-progress answers name (-: none)")
	fl.StringVar(&f.readyFile, "ready-file", "", "once serving, write the MCP endpoint's URL to this file (for scripts that start the gateway on --listen 127.0.0.1:0)")
	fl.StringVar(&f.hashKeyFile, "hash-key-file", "", "a file holding the deployment's hash key (at least 16 bytes; surrounding whitespace is ignored): every exported hash becomes an HMAC under it; the same file on every replica (make one: head -c 32 /dev/urandom | base64 > FILE)")
	return c
}

// validate checks the flag combination; errors say what to change.
func (f *gatewayFlags) validate(listenSet bool, command []string) error {
	switch {
	case f.upstream != "" && len(command) > 0:
		return usagef("give either --upstream URL or a stdio server's command after --, not both")
	case f.upstream == "" && len(command) == 0:
		return usagef("no upstream: give --upstream http://HOST:PORT/mcp, or a stdio server's command after -- (idemkit gateway --store memory -- node server.js)")
	case f.stdio && len(command) == 0:
		return usagef("--stdio serves a stdio server's command, given after --; --upstream cannot be served over stdio")
	case f.stdio && listenSet:
		return usagef("--stdio and --listen exclude each other: --stdio serves over stdin/stdout")
	case f.window <= 0:
		return usagef("--window must be positive, got %s", f.window)
	case f.lease <= 0:
		return usagef("--lease must be positive, got %s", f.lease)
	case f.maxMessage <= 0:
		return usagef("--max-message-bytes must be positive, got %d", f.maxMessage)
	case f.maxUp < 0 || f.maxUpSubject < 0:
		return usagef("--max-upstreams and --max-upstreams-per-subject must not be negative (0: the default)")
	case f.sessionIdle <= 0 || f.readTimeout <= 0 || f.idleTimeout <= 0:
		return usagef("--session-idle-timeout, --read-timeout and --idle-timeout must be positive")
	case f.lease > f.window:
		return usagef("--lease (%s) must not be longer than --window (%s): a completed call must outlive its claim", f.lease, f.window)
	case f.shareUpstream != "session" && f.shareUpstream != "subject":
		return usagef("--share-upstream must be session or subject, got %q", f.shareUpstream)
	case f.shareUpstream == "subject" && (len(command) == 0 || f.stdio):
		return usagef("--share-upstream subject shares a stdio server's processes between the HTTP sessions of one caller: it needs a command after -- and no --stdio")
	case f.shareUpstream == "subject" && f.subjectHeader == "-":
		return usagef("--share-upstream subject needs a subject header: with --subject-header - every caller would share one process")
	}
	for _, t := range f.protect {
		if slices.Contains(f.bypass, t) {
			return usagef("tool %q is given to both --protect and --bypass", t)
		}
	}
	for _, t := range slices.Concat(f.protect, f.bypass) {
		if strings.TrimSpace(t) == "" {
			return usagef("--protect and --bypass take tool names; got an empty one")
		}
	}
	if _, err := parseLevel(f.logLevel); err != nil {
		return err
	}
	if f.subjectHeader != "-" {
		if strings.ContainsAny(f.subjectHeader, " :\t") || f.subjectHeader == "" {
			return usagef("--subject-header %q is not a header name", f.subjectHeader)
		}
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("--log-level must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}

func runGateway(ctx context.Context, stderr io.Writer, stdin io.Reader, stdout io.Writer, changed func(flag string) bool, f gatewayFlags, command []string) error {
	// The file first: its defaults are the window and lease validate
	// checks.
	if err := f.loadConfig(changed); err != nil {
		return err
	}
	if err := f.validate(changed("listen"), command); err != nil {
		return err
	}
	su, err := parseStoreURL(f.store)
	if err != nil {
		return err
	}
	switch {
	case f.sweepEvery < 0:
		return usagef("--sweep-interval must not be negative, got %s", f.sweepEvery)
	case f.sweepEvery == 0 && su.kind == kindMemory:
		return usagef("--sweep-interval 0 with --store memory: a memory store is only emptied by sweeping, and would grow with every distinct call; give an interval (default 1m)")
	}
	hashKey, err := readHashKey(f.hashKeyFile)
	if err != nil {
		return err
	}
	level, _ := parseLevel(f.logLevel)
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if f.file != nil {
		log.Info("per-tool settings loaded", "config", f.describeConfig())
	}

	var up gateway.Upstream
	if f.upstream != "" {
		up, err = gateway.NewHTTPUpstream(f.upstream, nil)
	} else {
		var base *gateway.StdioUpstream
		base, err = gateway.NewStdioUpstream(command, nil, stderr, log)
		up = base
		if err == nil && f.shareUpstream == "subject" {
			up = gateway.NewSharedStdioUpstream(base)
		}
	}
	if err != nil {
		return &usageError{err}
	}

	st, err := openStore(ctx, f.store, openOptions{migrate: f.migrate || strings.HasPrefix(f.store, "sqlite:")})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.requireSchema(ctx); err != nil {
		return err
	}
	tel, err := newTelemetry(ctx, f.otlpEndpoint, f.serviceName)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tel.shutdown(sctx); err != nil {
			log.Warn("flushing telemetry failed", "error", err)
		}
	}()
	gcfg := f.guardConfig()
	gcfg.HashKey = hashKey
	guard, err := idemkit.NewGuard(st.Store, gcfg)
	if err != nil {
		return err
	}
	if f.sweepEvery > 0 {
		sctx, stop := context.WithCancel(ctx)
		swept := make(chan struct{})
		go func() {
			defer close(swept)
			sweep(sctx, guard, f.sweepEvery, log)
		}()
		defer func() {
			stop()
			<-swept
		}()
	}
	gw, err := gateway.New(gateway.Config{
		Upstream:               up,
		Guard:                  guard,
		Instrumentation:        instrumentation(tel, f, hashKey),
		SubjectHeader:          f.subjectHeader,
		MaxMessageBytes:        f.maxMessage,
		SessionIdleTimeout:     f.sessionIdle,
		MaxUpstreams:           f.maxUp,
		MaxUpstreamsPerSubject: f.maxUpSubject,
		ReadTimeout:            f.readTimeout,
		Logger:                 log,
	})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = gw.Close(cctx)
	}()

	if f.stdio {
		log.Info("serving MCP over stdio", "upstream", strings.Join(command, " "), "store", st.url.String())
		return gw.ServeStdio(ctx, stdin, stdout)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", gw)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: f.readTimeout, IdleTimeout: f.idleTimeout}
	srv.RegisterOnShutdown(gw.CloseStreams)
	target := f.upstream
	if target == "" {
		target = strings.Join(command, " ")
	}
	if f.readyFile != "" {
		if err := writeFileAtomic(f.readyFile, []byte(fmt.Sprintf("http://%s/mcp\n", ln.Addr()))); err != nil {
			ln.Close()
			return fmt.Errorf("--ready-file: %w", err)
		}
	}
	// Tests and scripts read this line to learn the address of --listen
	// 127.0.0.1:0.
	fmt.Fprintf(stderr, "idemkit gateway: serving MCP at http://%s/mcp in front of %s (store %s)\n", ln.Addr(), target, st.url)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// sweep deletes the store's expired records with g every interval until
// ctx ends, so that a memory store stays bounded by the calls of one
// window and a durable one does not grow without `idemkit sweep`.
func sweep(ctx context.Context, g *idemkit.Guard, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := g.Sweep(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("sweeping expired records failed; the next sweep tries again", "error", err)
			case n > 0:
				log.Debug("swept expired records", "records", n)
			}
		}
	}
}

// instrumentation configures the spans and metrics of every request and
// which tools are protected.
func instrumentation(tel *telemetry, f gatewayFlags, hashKey []byte) *mcpcall.Config {
	cfg := mcpcall.DefaultConfig()
	cfg.TracerProvider, cfg.MeterProvider = tel.tp, tel.mp
	cfg.HashKey = hashKey
	// The trace context clients send in params._meta (traceparent).
	cfg.Propagator = propagation.TraceContext{}
	f.applyToolSettings(&cfg)
	return &cfg
}

// maxHashKeyFile bounds what --hash-key-file reads: a key is a few dozen
// bytes, and a larger file is the wrong file.
const maxHashKeyFile = 4096

// readHashKey returns the hash key in the file at path (none for ""): its
// bytes with surrounding whitespace (a trailing newline) removed.
func readHashKey(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, usagef("--hash-key-file: %v", err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxHashKeyFile+1))
	if err != nil {
		return nil, usagef("--hash-key-file %s: %v", path, err)
	}
	if len(b) > maxHashKeyFile {
		return nil, usagef("--hash-key-file %s is over %d bytes: it should hold only the key (make one with: head -c 32 /dev/urandom | base64 > %s)", path, maxHashKeyFile, path)
	}
	key := bytes.TrimSpace(b)
	if len(key) < hashkey.MinKeyLen {
		return nil, usagef("--hash-key-file %s holds a %d-byte key; it needs at least %d bytes, so that nobody can guess it (make one with: head -c 32 /dev/urandom | base64 > %s)",
			path, len(key), hashkey.MinKeyLen, path)
	}
	return key, nil
}

// writeFileAtomic writes b to path through a temporary file and a rename,
// so that a reader never sees half of it.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
