package mcpcall

// ErrLocalRolledBack marks the failure of a phased tool call's local
// transaction (the transaction of its last phase, in which its writes and
// its outcome commit together; see idemkit.Guard.DoPhased): none of its
// writes were kept, its claim was released for a retry, and its external
// work (a payment) used the call's idempotency key, so the retry does not
// repeat it at a provider that deduplicates. It matches ErrRolledBack.
var ErrLocalRolledBack error = localRolledBack{}

type localRolledBack struct{}

func (localRolledBack) Error() string {
	return "the call's local transaction did not commit: none of its writes were kept"
}

func (localRolledBack) Is(target error) bool { return target == ErrRolledBack }

func localRolledBackText(tool string) string {
	return "The " + tool + " call was not completed: the database transaction of its last step could not be committed, so none of its writes were kept. " +
		"What it started outside this server used this call's idempotency key, so a retry does not do it twice. " +
		"Retry the same call in a few seconds: the retry completes it."
}
