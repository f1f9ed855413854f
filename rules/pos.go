package rules

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Pos is a position in a source file. Line and Col start at 1; a zero Col
// means the whole line.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string {
	file := p.File
	if file == "" {
		file = "-"
	}
	if p.Col == 0 {
		return fmt.Sprintf("%s:%d", file, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", file, p.Line, p.Col)
}

// IsValid reports whether p names a line.
func (p Pos) IsValid() bool { return p.Line > 0 }

// Compare orders positions by file, line and column.
func (p Pos) Compare(q Pos) int {
	return cmp.Or(strings.Compare(p.File, q.File), cmp.Compare(p.Line, q.Line), cmp.Compare(p.Col, q.Col))
}

// Error is a problem with the input at a position, optionally naming a
// second, related position ("first defined at 3:1").
type Error struct {
	Pos     Pos
	Msg     string
	Related Pos // zero when there is none
}

func (e *Error) Error() string {
	if e.Related.IsValid() {
		rel := e.Related
		if rel.File == e.Pos.File {
			return fmt.Sprintf("%s: %s (see %d:%d)", e.Pos, e.Msg, rel.Line, rel.Col)
		}
		return fmt.Sprintf("%s: %s (see %s)", e.Pos, e.Msg, rel)
	}
	return fmt.Sprintf("%s: %s", e.Pos, e.Msg)
}

// Errorf returns an *Error at pos.
func Errorf(pos Pos, format string, args ...any) *Error {
	return &Error{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

// ErrorList is a set of errors, printed one per line in position order.
type ErrorList []*Error

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Sort orders the list by position.
func (l ErrorList) Sort() {
	slices.SortStableFunc(l, func(a, b *Error) int { return a.Pos.Compare(b.Pos) })
}

// AsErrorList returns the rule errors err holds: its ErrorList, or its
// *Error as a list of one; false when it holds neither (an error of
// another kind, or nil).
func AsErrorList(err error) (ErrorList, bool) {
	var list ErrorList
	if errors.As(err, &list) {
		return list, true
	}
	var one *Error
	if errors.As(err, &one) {
		return ErrorList{one}, true
	}
	return nil, false
}

// Err returns nil for an empty list, the list sorted otherwise.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	l.Sort()
	return l
}
