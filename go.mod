module github.com/tirastore/tirastore

go 1.22

require (
	github.com/klauspost/cpuid/v2 v2.3.0 // indirect
	github.com/mattn/go-sqlite3 v1.14.53 // indirect
	golang.org/x/sys v0.30.0 // indirect
)
