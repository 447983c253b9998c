// Package idemstore is what a store of idemkit implements: the Store
// interface the Guard (idemkit.Guard) claims keys in, its requests and
// results, the stored Record, and the errors a store returns. A tool
// author imports package idemkit and picks a store (idemkit.MemoryStore,
// idemkit/sqlitestore, idemkit/pgstore); this package is for the authors
// of stores, for idemkit/storetest (the conformance suite every store
// passes) and for operators' tools that read records (Store.Lookup,
// Store.List).
//
// Requests carry a key as the string form the Guard gives them
// (idemkit.Key.ID) and the parts a store needs (the tool, the fingerprint),
// so that this package depends on the standard library only and idemkit
// can depend on it.
package idemstore
