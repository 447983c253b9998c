package idemkit

import (
	"fmt"

	"github.com/idemkit-mcp/idemkit/internal/runkey"
)

// NewRunKey returns the Key of a durable run: background work (a job of a
// job-and-poll tool, an MCP task) whose execution is itself a claim, with
// a lease its heartbeats keep, a progress note and a stored outcome, found
// again by its ID. Its ID is the namespace of owner's runs of kind (32 hex
// characters, the same for all of them, that never reveal owner)
// followed by id, so that a caller can only find the runs of its own owner
// namespace, and can list them (idemstore.ListRequest.KeyPrefix with the
// Key's Hash, which is that namespace). owner is the scope of the callers
// that may see the run ("" for a namespace every caller shares); id is the
// run's random ID, 32 lowercase hex characters (128 bits from a
// cryptographic source); tool is the tool whose work the run does: the
// record's Tool, and the Guard's per-tool configuration applies to it. The
// Key's Fingerprint is "".
//
// The jobs and tasks of package instrument are such runs. It returns an
// error wrapping ErrInvalidKey for an id of another form, or an invalid
// tool name.
func NewRunKey(kind, owner, tool, id string) (Key, error) {
	if err := validateToolName(tool); err != nil {
		return Key{}, err
	}
	if !runkey.ValidID(id) {
		return Key{}, fmt.Errorf("%w: %q is not a run ID (32 lowercase hex characters)", ErrInvalidKey, id)
	}
	prefix := runkey.Prefix(kind, owner)
	return Key{subject: owner, tool: tool, args: id, id: prefix + id}, nil
}
