package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
)

// sseReader reads the JSON-RPC messages of a Server-Sent Events stream
// (https://html.spec.whatwg.org/multipage/server-sent-events.html): events
// of type "message" (or no type) whose data is one JSON-RPC message. Events
// of other types, comments and empty data (priming events) are skipped.
type sseReader struct {
	r    *bufio.Reader
	max  int // the largest event's data, and line, read
	data bytes.Buffer
	// lastID is the last event ID the stream set (for Last-Event-ID).
	lastID string
	// retry is the reconnection time the stream asked for, in ms (0: none).
	retry int
}

// newSSEReader reads r's events, none of whose lines or data may be over
// max bytes (a *lineTooLongError otherwise).
func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 32<<10), max: max}
}

// next returns the data of the next message event, or an error (io.EOF at
// the stream's clean end).
func (s *sseReader) next() ([]byte, error) {
	event := ""
	s.data.Reset()
	hasData := false
	for {
		line, tooLong, err := readLine(s.r, s.max+len("data: ")+1) // +1: a '\r'
		if tooLong {
			return nil, &lineTooLongError{what: "the server sent an SSE line", limit: s.max}
		}
		if err != nil && (err != io.EOF || len(line) == 0) {
			if err == io.EOF && hasData && (event == "" || event == "message") {
				return append([]byte(nil), s.data.Bytes()...), nil
			}
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 { // dispatch
			if hasData && (event == "" || event == "message") && len(bytes.TrimSpace(s.data.Bytes())) > 0 {
				return append([]byte(nil), s.data.Bytes()...), nil
			}
			event, hasData = "", false
			s.data.Reset()
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			event = string(value)
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				s.lastID = string(value)
			}
		case "retry":
			if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 {
				s.retry = n
			}
		case "data":
			if s.data.Len()+len(value)+1 > s.max {
				return nil, &lineTooLongError{what: "the server sent an SSE event", limit: s.max}
			}
			if hasData {
				s.data.WriteByte('\n')
			}
			s.data.Write(value)
			hasData = true
		}
	}
}

// sseWriter writes JSON-RPC messages as Server-Sent Events, flushing each.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// start sends the status line and headers.
func (s *sseWriter) start() error {
	s.w.WriteHeader(http.StatusOK)
	return s.rc.Flush()
}

// write sends one message event.
func (s *sseWriter) write(b []byte) error {
	if _, err := io.WriteString(s.w, "event: message\ndata: "); err != nil {
		return err
	}
	// A JSON encoding holds no raw newline, but guard against one anyway.
	if bytes.IndexByte(b, '\n') >= 0 {
		b = bytes.ReplaceAll(b, []byte("\n"), []byte("\ndata: "))
	}
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	if _, err := io.WriteString(s.w, "\n\n"); err != nil {
		return err
	}
	return s.rc.Flush()
}
