package idemkit

// Version is the release of the idemkit modules this package belongs to.
// Every published module is tagged with it together (see RELEASING.md);
// instrumentation reports it as its scope version.
const Version = "0.1.0"
