package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestResolve_ZeroTakesTheDefaultNegativeLifts(t *testing.T) {
	if got, want := Resolve(0, 0, 0), (Limits{DefaultMaxSessions, DefaultIdleTimeout, DefaultMaxBodyBytes}); got != want {
		t.Errorf("Resolve(0, 0, 0) = %+v, want %+v", got, want)
	}
	if got := Resolve(-1, -1, -1); got != (Limits{}) {
		t.Errorf("Resolve(-1, -1, -1) = %+v, want no limits", got)
	}
	if got, want := Resolve(3, time.Second, 10), (Limits{3, time.Second, 10}); got != want {
		t.Errorf("Resolve(3, 1s, 10) = %+v", got)
	}
}

// Reservations count against the cap with the sessions open, so that
// concurrent initializes cannot open more than MaxSessions.
func TestSessions_ReservationsCountAgainstTheCap(t *testing.T) {
	s := NewSessions(Limits{MaxSessions: 2}, nil)
	first, second, third := s.Reserve(), s.Reserve(), s.Reserve()
	if !first || !second || third {
		t.Fatal("two reservations of a cap of 2, then a third: want yes, yes, no")
	}
	s.Add("a", nil) // the first opened a session
	s.Release()
	s.Release() // the second opened none
	if !s.Reserve() || s.Reserve() {
		t.Fatal("one session open of 2: want room for exactly one more")
	}
	s.Release()
	if s.Remove("a") != true || s.Remove("a") != false || s.Len() != 0 {
		t.Fatal("Remove")
	}
}

// A session with a request in progress (an SSE stream) is not idle however
// long it lasts; once it ends, the session is ended after the idle timeout.
func TestSessions_ARequestInProgressKeepsTheSession(t *testing.T) {
	ended := make(chan string, 2)
	s := NewSessions(Limits{IdleTimeout: 20 * time.Millisecond}, func(id string) { ended <- id })
	s.Add("streaming", nil)
	s.Add("quiet", nil)
	if !s.begin("streaming") {
		t.Fatal("begin")
	}
	select {
	case id := <-ended:
		if id != "quiet" {
			t.Fatalf("%s was ended, want quiet", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the quiet session was not ended")
	}
	time.Sleep(100 * time.Millisecond) // several idle checks
	if !s.Has("streaming") {
		t.Fatal("the session with a request in progress was ended")
	}
	s.done("streaming")
	select {
	case id := <-ended:
		if id != "streaming" {
			t.Fatalf("%s was ended", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the session was not ended once its request was done")
	}
	// The end callback runs before the session gives its place back: wait
	// for the place, bounded.
	for deadline := time.Now().Add(10 * time.Second); s.Len() != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if s.Len() != 0 {
		t.Fatalf("%d sessions left", s.Len())
	}
}

// A session counts once, from the moment its ID leaves in the response's
// headers: the reservation its initialize took is settled then, not when
// the handler returns (an SDK finishing up, an SSE stream still open), so
// that a client that goes on at once finds the room it should.
func TestHandler_AnOpenedSessionCountsOnceWhileItsRequestIsServed(t *testing.T) {
	for _, bound := range []bool{true, false} {
		t.Run(map[bool]string{true: "bound", false: "unbound"}[bound], func(t *testing.T) {
			sessions := NewSessions(Limits{MaxSessions: 2}, nil)
			written, finish := make(chan struct{}), make(chan struct{})
			h := &Handler{
				Limits:   Limits{MaxSessions: 2},
				Sessions: sessions,
				Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if !bound {
						sessions.Add("s1", nil) // as mcp-go's session manager does
					}
					w.Header().Set(SessionHeader, "s1")
					w.WriteHeader(http.StatusOK)
					close(written)
					<-finish
				}),
			}
			if bound {
				h.Subject = func(*http.Request) string { return "alice" }
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader("{}")))
			}()
			<-written
			// One session open of 2, its request still being served: room
			// for exactly one more.
			first, second := sessions.Reserve(), sessions.Reserve()
			close(finish)
			<-done
			if !first || second {
				t.Fatalf("one session open of 2 while its initialize is served: reserve, reserve = %v, %v; want true, false", first, second)
			}
			sessions.Release()
			if !sessions.Reserve() || sessions.Reserve() {
				t.Fatal("after the request: want room for exactly one more")
			}
		})
	}
}
