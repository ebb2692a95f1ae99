package schedule

// Repr is Python's repr() of a str. The engine uses it wherever the
// original formatted a value with !r in a message users match on (schedule
// reasons, the CPU-mismatch warning, the export format error).
func Repr(s string) string { return pyRepr(s) }
