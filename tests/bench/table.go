package main

import (
	"io"
	"strings"
	"unicode/utf8"
)

// table is a plain-text table: text columns left-aligned, numbers right.
type table struct {
	align string // one byte per column, 'l' or 'r'; missing columns are 'r'
	rows  [][]string
}

func newTable(align string, head ...string) *table {
	return &table{align: align, rows: [][]string{head}}
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer, indent string) {
	var width []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range t.rows {
		var b strings.Builder
		b.WriteString(indent)
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i > 0 {
				b.WriteString("  ")
			}
			if i < len(t.align) && t.align[i] == 'l' {
				b.WriteString(c)
				if i < len(r)-1 {
					b.WriteString(pad)
				}
			} else {
				b.WriteString(pad + c)
			}
		}
		io.WriteString(w, strings.TrimRight(b.String(), " ")+"\n")
	}
}
