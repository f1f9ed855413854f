package testenv

import (
	"bytes"
	"regexp"
	"slices"
	"strconv"
)

// Mutations returns variants of a rule set, as a reviewer damages input
// by hand and as files get damaged: lines deleted, duplicated, swapped
// and cut off; NUL bytes and CR line ends; an overlong token; numbers out
// of range; prefix lengths past the address; bad masks; stray quotes; and
// a chain of jumps nested deeper than any rule set. They seed the
// parsers' fuzz targets.
func Mutations(src []byte) [][]byte {
	lines := bytes.SplitAfter(src, []byte("\n"))
	join := func(ls [][]byte) []byte { return bytes.Join(ls, nil) }
	var out [][]byte
	add := func(b []byte) { out = append(out, b) }
	// At most a few positions of each kind, spread over the file.
	n := len(lines)
	at := []int{n / 4, n / 2, 3 * n / 4, n - 2}
	for _, i := range at {
		if i < 0 || i >= n {
			continue
		}
		rest := append(append([][]byte{}, lines[:i]...), lines[i+1:]...)
		add(join(rest)) // deleted
		dup := append(append(append([][]byte{}, lines[:i+1]...), lines[i]), lines[i+1:]...)
		add(join(dup)) // duplicated
		if i+1 < n {
			sw := append([][]byte{}, lines...)
			sw[i], sw[i+1] = sw[i+1], sw[i]
			add(join(sw)) // swapped
		}
	}
	for _, frac := range []int{3, 2} {
		add(src[:len(src)/frac]) // truncated
	}
	if len(src) > 10 {
		nul := bytes.Clone(src)
		nul[len(nul)/2] = 0
		add(nul)
	}
	add(bytes.ReplaceAll(src, []byte("\n"), []byte("\r\n")))
	if loc := regexp.MustCompile(`[A-Za-z_-]{4,}`).FindIndex(src); loc != nil {
		// An overlong token.
		add(slices.Concat(src[:loc[0]], bytes.Repeat([]byte("x"), 70000), src[loc[1]:]))
	}
	for _, repl := range []struct{ re, with string }{
		{`\b\d{1,5}\b`, "99999999999"},         // numbers out of range
		{`/(\d+)\b`, "/33"},                    // prefix past IPv4's
		{`/(\d+)\b`, "/129"},                   // and IPv6's
		{`/(\d+)\b`, "/255.0.255.0"},           // a mask with a hole
		{` (\S+)$`, " \"$1"},                   // an unclosed quote
		{`(?m) (\S+)$`, " \"$1\\"},             // an escape at the end
		{`(?m)^(\S)`, "\"$1"},                  // quotes opening lines
		{`\d+\.\d+\.\d+\.\d+`, "300.1.2.3"},    // bad addresses
		{`--?[a-z]+`, "--no-such-option"},      // unknown options
		{`(?m)^([^#\n]{8})`, "$1$1$1$1$1$1$1"}, // repeated heads
	} {
		add(regexp.MustCompile(repl.re).ReplaceAll(src, []byte(repl.with)))
	}
	return out
}

// DeepChains returns an iptables-restore input whose chains jump each to
// the next, depth deep.
func DeepChains(depth int) []byte {
	var b bytes.Buffer
	b.WriteString("*filter\n:INPUT ACCEPT [0:0]\n")
	for i := range depth {
		b.WriteString(":c" + strconv.Itoa(i) + " - [0:0]\n")
	}
	b.WriteString("-A INPUT -j c0\n")
	for i := 0; i+1 < depth; i++ {
		b.WriteString("-A c" + strconv.Itoa(i) + " -p tcp -j c" + strconv.Itoa(i+1) + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.Bytes()
}
