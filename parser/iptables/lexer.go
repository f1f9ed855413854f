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
	toks := make([]token, 0, 16)
	for i := 0; i < len(line); {
		c := line[i]
		if c == ' ' || c == '\t' || c == '\n' {
			i++
			continue
		}
		// Most words have no quotes: take them as a substring.
		j := i
		for j < len(line) && line[j] != ' ' && line[j] != '\t' && line[j] != '\n' && line[j] != '"' {
			j++
		}
		if j == len(line) || line[j] != '"' {
			toks = append(toks, token{text: line[i:j], col: col0 + i})
			i = j
			continue
		}
		text, next := quotedWord(line, i)
		toks = append(toks, token{text: text, col: col0 + i})
		i = next
	}
	return toks
}

// quotedWord reads a word starting at line[start] that contains a double
// quote; it returns the word and the index after it. The closing quote ends
// the word; an unterminated quote runs to the end of the line, as in
// iptables.
func quotedWord(line string, start int) (string, int) {
	var b strings.Builder
	inQuote, escaped := false, false
	i := start
	for ; i < len(line); i++ {
		c := line[i]
		if inQuote {
			switch {
			case escaped:
				b.WriteByte(c)
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				return b.String(), i + 1
			default:
				b.WriteByte(c)
			}
			continue
		}
		switch c {
		case '"':
			inQuote = true
		case ' ', '\t', '\n':
			return b.String(), i
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), i
}
