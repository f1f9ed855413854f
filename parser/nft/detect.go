package nft

import (
	"bufio"
	"bytes"
	"strings"
)

// hasStatement reports whether src holds anything but blank lines and
// comments.
func hasStatement(src []byte) bool {
	for _, line := range bytes.Split(src, []byte("\n")) {
		if line = bytes.TrimSpace(line); len(line) > 0 && line[0] != '#' {
			return true
		}
	}
	return false
}

// Detect reports whether src looks like nft input rather than
// iptables-save text: its first statement is an nft keyword.
func Detect(src []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		word, _, _ := strings.Cut(line, " ")
		switch word {
		case "table", "add", "insert", "create", "flush", "delete", "destroy", "define", "include", "list", "replace", "redefine", "undefine":
			return true
		}
		return false
	}
	return false
}
