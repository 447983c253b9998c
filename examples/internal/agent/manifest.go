package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Target is a refund server the duplicate generator runs its scenarios
// against.
type Target struct {
	// Name is "protected", "unprotected" or "gateway".
	Name string `json:"name"`
	// URL is the server's MCP endpoint.
	URL string `json:"url"`
	// Service is the server's service.name, the service_name label of the
	// Collector's attribution metrics.
	Service string `json:"service"`
	// Protected says whether idemkit protects the server's calls: its
	// Guard in the server, or the gateway in front of it.
	Protected bool `json:"protected"`
	// Gateway says that the target is idemkit gateway in front of an
	// unprotected server (Protected too): the spans and metrics are the
	// gateway's.
	Gateway bool `json:"gateway,omitempty"`
}

// Rank orders targets for reports: the protected server, the gateway, the
// unprotected server.
func (t Target) Rank() int {
	switch {
	case t.Gateway:
		return 1
	case t.Protected:
		return 0
	}
	return 2
}

// Describe says in a few words how the target is protected.
func (t Target) Describe() string {
	switch {
	case t.Gateway:
		return "idemkit gateway in front of the unprotected server"
	case t.Protected:
		return "protected by idemkit"
	}
	return "no idemkit"
}

// Dup is one expected (or attributed) duplicate tool call.
type Dup struct {
	Cause  string `json:"cause"`
	Effect string `json:"effect"`
}

func (d Dup) String() string { return d.Cause + "/" + d.Effect }

// Expectation is what one scenario must produce on one kind of server.
type Expectation struct {
	// Requests is the number of issue_refund calls that reach the server
	// (execute_tool spans).
	Requests int `json:"requests"`
	// Writes is the number of refund rows the scenario's order must end
	// with.
	Writes int `json:"writes"`
	// Intended is the number of refunds the agent meant to make: writes
	// above it are double refunds.
	Intended int `json:"intended"`
	// Duplicates are the issue_refund spans the dup processor must
	// annotate, with their cause and effect; every other issue_refund span
	// of the scenario must stay unannotated.
	Duplicates []Dup `json:"duplicates"`
}

// Step is one thing the agent did in a scenario.
type Step struct {
	At      time.Time      `json:"at"`
	Kind    string         `json:"kind"` // chat, call, reconnect, harness
	Tool    string         `json:"tool,omitempty"`
	Args    map[string]any `json:"args,omitempty"`
	Session string         `json:"session,omitempty"`
	Says    string         `json:"says,omitempty"`
	Result  *Result        `json:"result,omitempty"`
	Error   string         `json:"error,omitempty"`
}

// ScenarioRun is one scenario run against one target.
type ScenarioRun struct {
	Scenario     string      `json:"scenario"`
	Layer        string      `json:"layer"` // the expected cause, or "" for scenarios without duplicates
	Title        string      `json:"title"`
	Target       Target      `json:"target"`
	OrderID      string      `json:"order_id"`
	TraceID      string      `json:"trace_id"`
	Conversation string      `json:"conversation_id"`
	Started      time.Time   `json:"started"`
	Ended        time.Time   `json:"ended"`
	Expect       Expectation `json:"expect"`
	Steps        []Step      `json:"steps"`
	Wire         []WireEvent `json:"wire"`
	Error        string      `json:"error,omitempty"`
}

// Manifest is everything the duplicate generator did, for the report.
type Manifest struct {
	Started time.Time      `json:"started"`
	Ended   time.Time      `json:"ended"`
	Runs    []*ScenarioRun `json:"runs"`
}

// Find returns the run of a scenario against a target, or nil.
func (m *Manifest) Find(scenario, target string) *ScenarioRun {
	for _, r := range m.Runs {
		if r.Scenario == scenario && r.Target.Name == target {
			return r
		}
	}
	return nil
}

// Write writes the manifest as indented JSON.
func (m *Manifest) Write(path string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadManifest reads a manifest Write wrote.
func ReadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &m, nil
}
