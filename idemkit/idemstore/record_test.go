package idemstore_test

import (
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

func TestRecordState_Names(t *testing.T) {
	for _, s := range []idemstore.RecordState{idemstore.StateInProgress, idemstore.StateCompleted, idemstore.StateReleased} {
		text, err := s.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back idemstore.RecordState
		if err := back.UnmarshalText(text); err != nil || back != s {
			t.Fatalf("%s round-trips to %s, %v", s, back, err)
		}
	}
	if s, err := idemstore.ParseRecordState("in_flight"); err != nil || s != idemstore.StateInProgress {
		t.Fatalf("in_flight = %s, %v", s, err)
	}
	if _, err := idemstore.ParseRecordState("done"); err == nil {
		t.Fatal("ParseRecordState accepted an unknown name")
	}
	if _, err := idemstore.RecordState(0).MarshalText(); err == nil {
		t.Fatal("the zero RecordState marshalled")
	}
}
