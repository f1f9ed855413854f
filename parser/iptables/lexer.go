package iptables

import "strings"

// token is one argument of a command line and the column it starts at.
type token struct {
	text string
	col  int
	// unclosed is the column of a double quote that the line ends
	// before closing, 0 if none.
	unclosed int
}

// tokenize splits a command line the way iptables-restore's
// add_param_to_argv does: arguments are separated by blanks; a double quote
// anywhere opens a quoted section in which a backslash escapes the next
// character; the closing quote ends the argument (so `""` is an empty
// argument); outside quotes backslashes and single quotes are literal.
// col0 is the column of line[0]. The tokens are appended to toks.
func tokenize(toks []token, line string, col0 int) []token {
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
		text, next, open := quotedWord(line, i)
		tok := token{text: text, col: col0 + i}
		if open >= 0 {
			tok.unclosed = col0 + open
		}
		toks = append(toks, tok)
		i = next
	}
	return toks
}

// quotedWord reads a word starting at line[start] that contains a double
// quote; it returns the word and the index after it. The closing quote ends
// the word; an unterminated quote runs to the end of the line, as in
// iptables, and open is its index (-1 when every quote closes).
func quotedWord(line string, start int) (word string, next, open int) {
	var b strings.Builder
	inQuote, escaped := false, false
	open = -1
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
				return b.String(), i + 1, -1
			default:
				b.WriteByte(c)
			}
			continue
		}
		switch c {
		case '"':
			inQuote, open = true, i
		case ' ', '\t', '\n':
			return b.String(), i, -1
		default:
			b.WriteByte(c)
		}
	}
	if !inQuote {
		open = -1
	}
	return b.String(), i, open
}
