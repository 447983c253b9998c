package idemkit

// UsePlainContexts makes g build the work's and the finish's contexts with
// the standard library instead of its attempt, for the benchmark that
// compares the two.
func UsePlainContexts(g *Guard) { g.plainContexts = true }
