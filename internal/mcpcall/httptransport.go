package mcpcall

import (
	"net"
	"net/http"
	"strconv"

	"github.com/idemkit-mcp/idemkit/spancontract"
)

// HTTPTransport returns the Transport of a request served over Streamable
// HTTP: network.transport tcp, network.protocol.name http and its version
// ("1.1", "2", "3"), and the peer's client.address and client.port.
// authenticSessions says whether the server issues and validates the
// session IDs it accepts (see Transport.AuthenticSessions).
func HTTPTransport(r *http.Request, authenticSessions bool) Transport {
	t := Transport{
		Network:           spancontract.TransportTCP,
		ProtocolName:      "http",
		AuthenticSessions: authenticSessions,
	}
	switch {
	case r.ProtoMajor == 1:
		t.ProtocolVersion = "1." + strconv.Itoa(r.ProtoMinor)
	case r.ProtoMajor > 1:
		t.ProtocolVersion = strconv.Itoa(r.ProtoMajor)
	}
	if host, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		t.ClientAddress = host
		t.ClientPort, _ = strconv.Atoi(port)
	} else {
		t.ClientAddress = r.RemoteAddr
	}
	return t
}
