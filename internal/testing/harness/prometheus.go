package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
)

// ScrapeJob is one scrape job of a Prometheus the harness runs.
type ScrapeJob struct {
	Name string
	// HonorLabels keeps the job and instance labels of the exposition (the
	// Collector's prometheus exporter puts each server's service.name in
	// job).
	HonorLabels bool
	// Targets are host:port; the path is /metrics.
	Targets []string
}

// PrometheusConfig configures StartPrometheus.
type PrometheusConfig struct {
	// Dir holds prometheus.yml and the TSDB (created when missing).
	Dir string
	// ScrapeInterval is the scrape and evaluation interval. Defaults to 1s.
	ScrapeInterval time.Duration
	// Jobs are the scrape jobs.
	Jobs []ScrapeJob
}

// Prometheus is a running Prometheus server.
type Prometheus struct {
	// URL is its base URL, http://127.0.0.1:PORT.
	URL string
	// API is its HTTP API client.
	API v1.API
	// ConfigFile is the prometheus.yml it runs with.
	ConfigFile string
	// Proc is the server's process.
	Proc *Proc
}

// StartPrometheus installs Prometheus when missing (the Debian package
// prometheus), starts it on a free local port with the configuration's
// jobs, and waits until it is ready.
func StartPrometheus(ctx context.Context, g *Group, cfg PrometheusConfig) (*Prometheus, error) {
	bin, err := EnsureCommand(ctx, "prometheus", "prometheus", os.Stderr)
	if err != nil {
		return nil, err
	}
	if cfg.ScrapeInterval <= 0 {
		cfg.ScrapeInterval = time.Second
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by the idemkit test harness (internal/testing/harness).\nglobal:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\nscrape_configs:\n",
		cfg.ScrapeInterval, cfg.ScrapeInterval*9/10, cfg.ScrapeInterval)
	for _, j := range cfg.Jobs {
		fmt.Fprintf(&b, "  - job_name: %q\n    honor_labels: %v\n    static_configs:\n      - targets: [", j.Name, j.HonorLabels)
		for i, t := range j.Targets {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q", t)
		}
		b.WriteString("]\n")
	}
	config := filepath.Join(cfg.Dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	data := filepath.Join(cfg.Dir, "data")
	if err := os.RemoveAll(data); err != nil {
		return nil, err
	}
	proc, err := g.Start("prometheus", nil, bin, "--config.file="+config, "--storage.tsdb.path="+data,
		"--storage.tsdb.retention.time=1d", "--web.listen-address="+addr, "--log.level=warn")
	if err != nil {
		return nil, err
	}
	url := "http://" + addr
	if err := proc.WaitReady(ctx, "ready", 60*time.Second, HTTPOK(url+"/-/ready")); err != nil {
		return nil, err
	}
	api, err := NewPrometheusAPI(url)
	if err != nil {
		return nil, err
	}
	return &Prometheus{URL: url, API: api, ConfigFile: config, Proc: proc}, nil
}

// NewPrometheusAPI returns a client of the Prometheus HTTP API at url.
func NewPrometheusAPI(url string) (v1.API, error) {
	c, err := api.NewClient(api.Config{Address: url})
	if err != nil {
		return nil, err
	}
	return v1.NewAPI(c), nil
}

// WaitScraped waits until Prometheus scraped every target (host:port)
// successfully with a scrape that started at or after since.
func WaitScraped(ctx context.Context, p v1.API, targets []string, since time.Time) error {
	for {
		res, err := p.Targets(ctx)
		var missing []string
		if err != nil {
			missing = append(missing, err.Error())
		} else {
			for _, h := range targets {
				ok, state := false, "not a target"
				for _, t := range res.Active {
					if !strings.Contains(t.ScrapeURL, "//"+h+"/") {
						continue
					}
					state = fmt.Sprintf("health %s, last scrape %s %s", t.Health, t.LastScrape.Format(time.RFC3339Nano), t.LastError)
					if t.Health == v1.HealthGood && !t.LastScrape.Before(since) {
						ok = true
					}
				}
				if !ok {
					missing = append(missing, h+": "+state)
				}
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("Prometheus did not scrape in time: %s", strings.Join(missing, "; "))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
