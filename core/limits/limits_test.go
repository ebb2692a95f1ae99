package limits

import (
	"strings"
	"testing"
)

func nest(depth int) string { return strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth) }

func TestTooDeep(t *testing.T) {
	for _, c := range []struct {
		text  string
		depth int
		over  bool
	}{
		{nest(MaxValueDepth - 1), 0, false},                                   // too short to be measured
		{`{"pad": "` + strings.Repeat("x", 300) + `", "v": [[1]]}`, 3, false}, // measured, within
		{nest(MaxValueDepth) + strings.Repeat(" ", 10), MaxValueDepth, false},
		{nest(MaxValueDepth + 1), MaxValueDepth + 1, true},
		{nest(990), 990, true},
	} {
		d, over := TooDeep(c.text)
		if d != c.depth || over != c.over {
			t.Errorf("TooDeep(%.30q...) = %d, %v; want %d, %v", c.text, d, over, c.depth, c.over)
		}
		if d2, over2 := TooDeep([]byte(c.text)); d2 != d || over2 != over {
			t.Errorf("TooDeep([]byte) differs: %d, %v", d2, over2)
		}
	}
}

// TestFigures: the limits keep to the ceilings they are chosen under
// (docs/limits.md): a text far below SQLite's SQLITE_MAX_LENGTH, a request
// room for the largest text with its escapes.
func TestFigures(t *testing.T) {
	const sqliteMaxLength = 1_000_000_000
	if MaxTextBytes*3 > sqliteMaxLength || MaxRequestBytes < MaxTextBytes+MaxTextBytes/2 {
		t.Fatalf("MaxTextBytes %d, MaxRequestBytes %d", MaxTextBytes, MaxRequestBytes)
	}
	if TextLimit() != MaxTextBytes || RequestLimit() != MaxRequestBytes {
		t.Fatal("the limits are lifted outside the failpoints build")
	}
}
