package timing

import "testing"

func BenchmarkSummarizeFive(b *testing.B) {
	times := []float64{0.041, 0.04, 0.043, 0.04, 0.05}
	for i := 0; i < b.N; i++ {
		Summarize(times)
	}
}
