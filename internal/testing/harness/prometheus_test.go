package harness

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// TestStartPrometheus_ScrapesAndAnswers runs a real Prometheus against a
// local exposition and reads the sample back through the API client,
// honor_labels keeping the exposition's job.
func TestStartPrometheus_ScrapesAndAnswers(t *testing.T) {
	if _, err := exec.LookPath("prometheus"); err != nil && !CI() {
		t.Skip("no prometheus (apt-get install prometheus); under CI=true this test installs it or fails")
	}
	exposition := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# TYPE harness_test_total counter\nharness_test_total{job=\"from-exposition\",tool=\"x\"} 7\n")
	}))
	defer exposition.Close()
	target := strings.TrimPrefix(exposition.URL, "http://")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := &Group{Dir: t.TempDir()}
	defer func() {
		if err := g.StopAll(10 * time.Second); err != nil {
			t.Error(err)
		}
	}()
	prom, err := StartPrometheus(ctx, g, PrometheusConfig{Dir: t.TempDir(), Jobs: []ScrapeJob{{Name: "test", HonorLabels: true, Targets: []string{target}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitScraped(ctx, prom.API, []string{target}, time.Now()); err != nil {
		t.Fatal(err)
	}
	v, _, err := prom.API.Query(ctx, `harness_test_total{job="from-exposition"}`, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	vec, ok := v.(model.Vector)
	if !ok || len(vec) != 1 || vec[0].Value != 7 || vec[0].Metric["tool"] != "x" {
		t.Fatalf("query returned %v", v)
	}
	// A target nobody serves is never scraped successfully.
	wctx, wcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer wcancel()
	if err := WaitScraped(wctx, prom.API, []string{"127.0.0.1:1"}, time.Now()); err == nil || !strings.Contains(err.Error(), "not a target") {
		t.Errorf("WaitScraped on an unknown target: %v", err)
	}
}
