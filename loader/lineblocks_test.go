package loader

import (
	"fmt"
	"strings"
	"testing"
)

// TestLineBlocks: a text cut into many blocks gives back every line and
// the whole text, with or without a newline at its end, and nothing past
// its last line; and the same once packed, when it no longer reads the
// text it was made of.
func TestLineBlocks(t *testing.T) {
	var b strings.Builder
	for i := range 40000 {
		fmt.Fprintf(&b, "[%d:%d] -A INPUT -s 10.%d.%d.%d/32 -p tcp -m tcp --dport %d -j DROP\n", i, 7*i, i>>16, i>>8&255, i&255, i%65536)
	}
	b.WriteString("\n-A INPUT -j ACCEPT") // an empty line, and a last one without a newline
	for _, text := range []string{b.String(), b.String() + "\n", "", "one line\n"} {
		buf := []byte(text)
		lb := newLineBlocks(buf)
		if len(text) > 2*lineBlockSize && len(lb.blocks) < 2 {
			t.Fatalf("%d bytes in %d block", len(text), len(lb.blocks))
		}
		checkLines(t, lb, text)
		lb.pack()
		for i, blk := range lb.blocks {
			if !blk.packed {
				t.Fatalf("block %d is not packed", i)
			}
		}
		clear(buf) // what the blocks viewed
		checkLines(t, lb, text)
	}
}

// checkLines checks that lb holds text.
func checkLines(t *testing.T, lb *lineBlocks, text string) {
	t.Helper()
	if lb.size != len(text) {
		t.Errorf("size %d, want %d", lb.size, len(text))
	}
	got, err := lb.String()
	if err != nil || got != text {
		t.Fatalf("String: %d bytes (%v), want %d", len(got), err, len(text))
	}
	lines := strings.SplitAfter(text, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	// Every line, in order, and then a few out of order.
	order := make([]int, 0, len(lines)+4)
	for n := range lines {
		order = append(order, n+1)
	}
	order = append(order, len(lines)/2, 1, len(lines), len(lines)/3)
	for _, n := range order {
		if n < 1 || n > len(lines) {
			continue // the empty text's
		}
		line, ok, err := lb.line(n)
		if want := strings.TrimSuffix(lines[n-1], "\n"); err != nil || !ok || line != want {
			t.Fatalf("line %d of %d: %q %v %v, want %q", n, len(lines), line, ok, err, want)
		}
	}
	for _, n := range []int{0, -1, len(lines) + 1, len(lines) + 100} {
		if line, ok, err := lb.line(n); ok || err != nil {
			t.Errorf("line %d of %d: %q %v %v, want none", n, len(lines), line, ok, err)
		}
	}
}
