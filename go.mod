module github.com/tirastore/tirastore

go 1.22

require (
	github.com/hanwen/go-fuse/v2 v2.12.1
	github.com/klauspost/cpuid/v2 v2.3.0
	github.com/mattn/go-sqlite3 v1.14.53
	golang.org/x/sys v0.30.0
)
