package rules

import (
	"errors"
	"fmt"
	"testing"
)

// TestAsErrorList: the rule errors of an error however wrapped, one
// *Error as a list of one, and nothing for other errors.
func TestAsErrorList(t *testing.T) {
	one := Errorf(Pos{File: "f", Line: 3, Col: 1}, "bad")
	list := ErrorList{one, Errorf(Pos{File: "f", Line: 4, Col: 1}, "worse")}
	for _, c := range []struct {
		err  error
		want ErrorList
		ok   bool
	}{
		{list, list, true},
		{fmt.Errorf("compile: %w", list), list, true},
		{fmt.Errorf("compile: %w", one), ErrorList{one}, true},
		{errors.New("other"), nil, false},
		{nil, nil, false},
	} {
		got, ok := AsErrorList(c.err)
		if ok != c.ok || len(got) != len(c.want) || len(got) > 0 && got[0] != c.want[0] {
			t.Errorf("AsErrorList(%v) = %v, %v; want %v, %v", c.err, got, ok, c.want, c.ok)
		}
	}
}
