package gateway

import (
	"bufio"
	"fmt"
)

// readLine reads one line (through its '\n', or to the end of the input)
// of at most max bytes. A longer line is read to its end and dropped: it
// returns tooLong and no bytes, never holding more than max of them.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			n := len(line) + len(chunk)
			if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
				n--
			}
			if n > max {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if tooLong {
			line = nil
		}
		return line, tooLong, err
	}
}

// lineTooLongError: a line (or an SSE event) over the message limit.
type lineTooLongError struct {
	what  string // "the server process wrote a line", ...
	limit int
}

func (e *lineTooLongError) Error() string {
	return fmt.Sprintf("%s over %d bytes, the largest message the idemkit gateway reads (--max-message-bytes)", e.what, e.limit)
}
