package sqlitestore

// WaitingWrites returns how many of the store's writes wait for its gate.
func WaitingWrites(s *Store) int { return s.gate.waiting() }
