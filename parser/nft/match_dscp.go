package nft

import (
	"bpfwall/rules"
)

// ip dscp and ip6 dscp: the six DSCP bits, compared with values, names,
// ranges and sets. A rule becomes one model rule per value, or, with !=,
// one rule that tests every value's negation.

// dscpNames are nft's names of code points (dscp_type_tbl).
var dscpNames = map[string]uint8{
	"cs0": 0x00, "cs1": 0x08, "cs2": 0x10, "cs3": 0x18, "cs4": 0x20, "cs5": 0x28, "cs6": 0x30, "cs7": 0x38,
	"df": 0x00, "be": 0x00, "lephb": 0x01,
	"af11": 0x0a, "af12": 0x0c, "af13": 0x0e, "af21": 0x12, "af22": 0x14, "af23": 0x16,
	"af31": 0x1a, "af32": 0x1c, "af33": 0x1e, "af41": 0x22, "af42": 0x24, "af43": 0x26,
	"va": 0x2c, "ef": 0x2e,
}

// dscpValue reads one code point: a name or a number up to 63.
func dscpValue(s string) (uint64, bool) {
	if v, ok := dscpNames[s]; ok {
		return uint64(v), true
	}
	v, err := parseNum(s, 8)
	return v, err == nil && v <= 63
}

func (b *ruleBuilder) dscp(pos rules.Pos, key, op string, val rhs) {
	var values uint64 // bit v: the rule matches code point v
	elems := b.expandRef(pos, val)
	for _, e := range elems {
		lo, ok := dscpValue(e.lo)
		hi := lo
		if ok && e.hasRange {
			hi, ok = dscpValue(e.hi)
		}
		if !ok || e.hasMask || hi < lo {
			b.errorf(e.pos, "bad %s value %q", key, e.lo)
			return
		}
		if lo, hi, ok = b.opRange(pos, op, elems, e, lo, hi, 63); !ok {
			return
		}
		for v := lo; v <= hi; v++ {
			values |= 1 << v
		}
	}
	mk := func(v uint8, neg bool) cond {
		return func(r *rules.Rule) bool {
			r.Matches = append(r.Matches, &rules.DSCP{Located: rules.Located{Pos: pos}, Value: v, Neg: neg})
			return true
		}
	}
	if op == "!=" {
		var a alt
		for v := range uint8(64) {
			if values&(1<<v) != 0 {
				a = append(a, mk(v, true))
			}
		}
		b.add(choice{a})
		return
	}
	var c choice
	for v := range uint8(64) {
		if values&(1<<v) != 0 {
			c = append(c, alt{mk(v, false)})
		}
	}
	b.add(c)
}

// opRange gives the range of values a comparison of one value (<, <=, >,
// >=) holds for; lo..hi stay as they are for "", == and !=. It reports
// false when it ended the rule: an error, or no value holds.
func (b *ruleBuilder) opRange(pos rules.Pos, op string, elems []elem, e elem, lo, hi, maxV uint64) (uint64, uint64, bool) {
	switch op {
	case "", "==", "!=":
		return lo, hi, true
	}
	if len(elems) != 1 || e.hasRange {
		b.errorf(pos, "%s needs one value", op)
		return 0, 0, false
	}
	r, ok := cmpRange(op, lo, maxV)
	if !ok {
		b.add(choice{})
		return 0, 0, false
	}
	return r[0], r[1], true
}
