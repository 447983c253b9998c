// Package devtools is the development module of the repository: tools that
// build, publish and check idemkit the way its users receive it. It is never
// tagged or published, and nothing outside the repository imports it.
package devtools
