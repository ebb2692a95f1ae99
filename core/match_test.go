package core

import (
	"testing"

	"github.com/tirastore/tirastore/core/runctx"
)

func TestMatchRules(t *testing.T) {
	t.Parallel()
	gold := runctx.Static{Host: "a", CPUModel: "Intel(R) Xeon(R) Gold 6248", CPUVendor: "GenuineIntel", CPUFamily: 6, CPUModelID: 85,
		CPUFlags: []string{"AVX2", "AVX512F"}, Cores: 40, Tools: map[string]string{"gcc": "13"}}
	silver := gold
	silver.Host, silver.CPUModel, silver.Cores = "b", "Intel(R) Xeon(R) Silver 4210", 20
	epyc := gold
	epyc.CPUModel, epyc.CPUVendor, epyc.CPUFamily, epyc.CPUModelID = "AMD EPYC 7742", "AuthenticAMD", 23, 49
	arm1, arm2 := gold, gold
	arm1.CPUFamily, arm1.CPUModelID, arm1.CPUModel = 0, 0, "Neoverse-N1"
	arm2.CPUFamily, arm2.CPUModelID, arm2.CPUModel = 0, 0, "Neoverse-V1"

	rules := func(m map[string]string) []fieldRule {
		r, err := compileMatch(m)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	family := rules(map[string]string{"cpu_model": "family", "host": "any"})
	for _, c := range []struct {
		name   string
		rules  []fieldRule
		theirs *runctx.Static
		want   []string // fields that differ
	}{
		{"same family, another SKU", family, &silver, nil},
		{"another family", family, &epyc, []string{"cpu_model"}},
		{"no CPUID numbers: the model strings", family, &arm2, []string{"cpu_model"}},
		{"exact model", rules(map[string]string{"cpu_model": "exact"}), &silver, []string{"cpu_model"}},
		{"cores and host", rules(map[string]string{"cores": "exact", "host": "exact", "tools": "exact"}), &silver, []string{"cores", "host"}},
		{"unknown context", family, nil, []string{"cpu_model"}},
		{"no rules", nil, &epyc, nil},
	} {
		ours := &gold
		if c.name == "no CPUID numbers: the model strings" {
			ours = &arm1
		}
		m := differs(c.rules, c.theirs, ours)
		if len(m) != len(c.want) {
			t.Errorf("%s: differs %v, want fields %v", c.name, m, c.want)
			continue
		}
		for _, f := range c.want {
			if _, ok := m[f]; !ok {
				t.Errorf("%s: differs %v, want fields %v", c.name, m, c.want)
			}
		}
	}
	if m := differs(family, nil, &gold); m["cpu_model"] != [2]string{"unknown", gold.CPUModel} {
		t.Errorf("an unknown context is shown as %v", m)
	}
	for _, bad := range []map[string]string{{"nope": "exact"}, {"cores": "family"}, {"cpu_model": "fuzzy"}} {
		if _, err := compileMatch(bad); KindOf(err) != KindValue {
			t.Errorf("compileMatch(%v) = %v, want a ValueError", bad, err)
		}
	}
}
