package nodelocal

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/tirastore/tirastore/core/environ"
)

// # Names
//
// The node-local files of a database are named, in this user's private
// directory (PrivatePath), by a prefix and the first 24 hex digits of the
// SHA-256 of the lock path (Name). Processes of other versions sharing the
// node, tools and tests compute them by this rule: the names must never
// change.
const (
	// GatePrefix names the node queue's gate file (internal/nodequeue).
	GatePrefix = "gate-"
	// SpoolPrefix names the group-commit spool directory (internal/spool).
	SpoolPrefix = "spool-"
	// ChangeLogPrefix names the change log (internal/changelog).
	ChangeLogPrefix = "changes-"
)

// Name is the name, in the private directory, of the node-local file that
// prefix names for the lock at lockPath.
func Name(prefix, lockPath string) string {
	sum := sha256.Sum256([]byte(lockPath))
	return prefix + hex.EncodeToString(sum[:12])
}

// # Switches
//
// Each speed-up that node-local files serve can be switched off by an
// environment variable set to "0" (for comparisons; docs/design.md,
// "How the shared-file backend works"); any other value, or none, leaves it on.
// They are read here only, live (core/environ), each time a store opens.

// QueueEnabled reports whether the node queue is on: TIRASTORE_NODE_QUEUE
// is not "0". Off, every process polls the lock as from another node.
func QueueEnabled() bool { return environ.Get("TIRASTORE_NODE_QUEUE") != "0" }

// GroupCommitEnabled reports whether group commit is on:
// TIRASTORE_GROUP_COMMIT is not "0" and the node queue is on (writes are
// handed over in the queue's writers' lane, so without the queue there is
// no group commit).
func GroupCommitEnabled() bool {
	return QueueEnabled() && environ.Get("TIRASTORE_GROUP_COMMIT") != "0"
}

// ChangeLogEnabled reports whether the change log is on:
// TIRASTORE_CHANGE_LOG is not "0".
func ChangeLogEnabled() bool { return environ.Get("TIRASTORE_CHANGE_LOG") != "0" }
