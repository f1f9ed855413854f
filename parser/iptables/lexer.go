package iptables

import "strings"

// token is one argument of a command line and the column it starts at.
type token struct {
	text string
	col  int
}

// tokenize splits a command line the way iptables-restore's
// add_param_to_argv does: arguments are separated by blanks; a double quote
// anywhere opens a quoted section in which a backslash escapes the next
// character; the closing quote ends the argument (so `""` is an empty
// argument); outside quotes backslashes and single quotes are literal.
// col0 is the column of line[0].
func tokenize(line string, col0 int) []token {
	var (
		toks    []token
		cur     strings.Builder
		start   = -1
		inQuote bool
		escaped bool
	)
	emit := func() {
		toks = append(toks, token{text: cur.String(), col: col0 + start})
		cur.Reset()
		start = -1
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		if inQuote {
			switch {
			case escaped:
				cur.WriteByte(c)
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inQuote = false
				emit()
			default:
				cur.WriteByte(c)
			}
			continue
		}
		switch c {
		case '"':
			if start < 0 {
				start = i
			}
			inQuote = true
		case ' ', '\t', '\n':
			if start >= 0 {
				emit()
			}
		default:
			if start < 0 {
				start = i
			}
			cur.WriteByte(c)
		}
	}
	// An unterminated quote runs to the end of the line, as in iptables.
	if start >= 0 {
		emit()
	}
	return toks
}
