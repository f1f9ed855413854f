package nft

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"

	"bpfwall/rules"
)

// concat translates "k1 . k2 [==] { v1 . v2, ... }": each element is the
// conjunction of its parts, each compared with its key as a single value;
// the elements are alternatives, which must not overlap, so that the
// rule fires at most once whatever its action.
func (b *ruleBuilder) concat(pos rules.Pos, keys []string, op string, val rhs) {
	for _, k := range keys {
		if !knownKeys[k] {
			b.unsupported(pos, k)
			return
		}
	}
	if op != "" && op != "==" && op != "!=" {
		b.unsupported(pos, "concatenation "+op)
		return
	}
	nerrs, nconds := len(*b.errs), len(b.conds)
	elems := b.setElems(pos, val)
	if len(*b.errs) > nerrs || len(b.conds) > nconds {
		return // reported, or unsupported
	}
	if len(elems) == 0 {
		// No element: "==" matches no packet, "!=" every packet where
		// nft can load each key.
		if op == "!=" {
			for _, k := range keys {
				b.keyLoaded(k)
			}
			return
		}
		b.add(choice{})
		return
	}
	if op == "!=" {
		// Not in the set: for each element, NOT(k1 == v1 AND k2 == v2 ...),
		// the disjoint "k1 != v1", "k1 == v1 AND k2 != v2", ...
		for _, el := range elems {
			c, ok := b.negTuple(keys, el)
			if !ok {
				return
			}
			b.add(c)
		}
		return
	}
	// Elements may overlap (iptables-translate writes --ports 10 as
	// "tcp sport . tcp dport { 0-65535 . 10, 10 . 0-65535 }"): each
	// element's alternatives exclude the earlier elements it may share a
	// packet with, so that they stay disjoint and the rule fires once.
	var out choice
	for i, el := range elems {
		alts, ok := b.tuple(keys, el)
		if !ok {
			return
		}
		conj, covered := []choice{alts}, false
		for _, prev := range elems[:i] {
			if tuplesApart(keys, el, prev) {
				continue
			}
			// Parts of el within prev's always equal prev's: not being
			// prev is differing in one of the others.
			var differ []int
			for k, key := range keys {
				if !partWithin(key, el.parts[k], prev.parts[k]) {
					differ = append(differ, k)
				}
			}
			if len(differ) == 0 {
				covered = true // every packet of el is prev's
				break
			}
			conj = append(conj, b.notParts(keys, prev, differ))
		}
		if covered {
			continue
		}
		n := 1
		for _, c := range conj {
			if n *= len(c); n > maxSplit {
				b.unsupported(pos, "concatenation with overlapping elements")
				return
			}
		}
		out = append(out, product(conj)...)
		if len(out) > maxSplit {
			b.unsupported(pos, "concatenation with overlapping elements")
			return
		}
	}
	b.add(out)
}

// partWithin reports whether every value of part x of key is one of
// part y's.
func partWithin(key string, x, y elem) bool {
	xl, xh, ok1 := partRange(key, x)
	yl, yh, ok2 := partRange(key, y)
	return ok1 && ok2 && bytes.Compare(yl, xl) <= 0 && bytes.Compare(xh, yh) <= 0
}

// notParts returns the disjoint alternatives of a packet's differing
// from element el in at least one of the parts idx: every combination of
// "==" and "!=" of those parts but all "==". The other parts are not
// compared; the caller's context loads them.
func (b *ruleBuilder) notParts(keys []string, el elem, idx []int) choice {
	savedConds, savedICMP := b.conds, b.icmp
	var out choice
	for neg := 1; neg < 1<<len(idx); neg++ {
		b.conds, b.icmp = nil, nil
		for j, k := range idx {
			op := "=="
			if neg&(1<<j) != 0 {
				op = "!="
			}
			b.relation(el.parts[k].pos, keys[k], op, nil, rhs{elems: []elem{el.parts[k]}})
		}
		b.flushICMP()
		out = append(out, product(b.conds)...)
	}
	b.conds, b.icmp = savedConds, savedICMP
	return out
}

// tuplesApart reports whether no packet matches both elements x and y of
// a concatenation of keys: some part of theirs is apart.
func tuplesApart(keys []string, x, y elem) bool {
	if len(x.parts) != len(keys) || len(y.parts) != len(keys) {
		return false
	}
	for k, key := range keys {
		if partsApart(key, x.parts[k], y.parts[k]) {
			return true
		}
	}
	return false
}

// keyLoaded adds what nft needs to load key, as the dependencies it
// adds to a payload expression: the packet's family for the network
// header's fields, and the transport protocol for the transport
// header's.
func (b *ruleBuilder) keyLoaded(key string) {
	proto, _, _ := strings.Cut(key, " ")
	switch proto {
	case "ip":
		b.needFamily(rules.IPv4)
	case "ip6":
		b.needFamily(rules.IPv6)
	case "icmp":
		if b.needFamily(rules.IPv4) {
			b.add(always1(b.dep(1)))
		}
	case "icmpv6":
		if b.needFamily(rules.IPv6) {
			b.add(always1(b.dep(58)))
		}
	case "tcp", "udp", "th":
		if _, field, _ := strings.Cut(key, " "); field == "sport" || field == "dport" {
			// The whole range of ports: the packets nft loads the port
			// of (its transport header holds it).
			b.relation(b.src.pos, key, "", nil, rhs{elems: []elem{{pos: b.src.pos, lo: "0", hi: "65535", hasRange: true}}})
			return
		}
		p, _ := parseProto(proto)
		b.add(always1(b.dep(p)))
	case "sctp":
		p, _ := parseProto(proto)
		b.add(always1(b.dep(p)))
	}
}

// tuple returns the alternatives of one element of a concatenation.
func (b *ruleBuilder) tuple(keys []string, el elem) (choice, bool) {
	if len(el.parts) != len(keys) {
		b.errorf(el.pos, "%d values for a concatenation of %d keys (%s)", max(len(el.parts), 1), len(keys), strings.Join(keys, " . "))
		return nil, false
	}
	savedConds, savedICMP := b.conds, b.icmp
	b.conds, b.icmp = nil, nil
	for i, k := range keys {
		b.relation(el.parts[i].pos, k, "", nil, rhs{elems: []elem{el.parts[i]}})
	}
	b.flushICMP()
	alts := product(b.conds)
	b.conds, b.icmp = savedConds, savedICMP
	return alts, true
}

// negTuple returns the alternatives of a packet's not matching one
// element of a concatenation: every combination of "==" and "!=" of the
// parts but all "==". Each alternative compares every part, so that it
// holds only where nft loads every key (a rule "ip saddr . tcp dport !=
// { ... }" never matches a UDP packet, or a TCP one cut short).
func (b *ruleBuilder) negTuple(keys []string, el elem) (choice, bool) {
	if len(el.parts) != len(keys) {
		b.errorf(el.pos, "%d values for a concatenation of %d keys (%s)", max(len(el.parts), 1), len(keys), strings.Join(keys, " . "))
		return nil, false
	}
	all := make([]int, len(keys))
	for i := range all {
		all[i] = i
	}
	return b.notParts(keys, el, all), true
}

// product is the conjunction of choices as one choice: an alternative of
// each, every way.
func product(cs []choice) choice {
	out := choice{alt{}}
	for _, c := range cs {
		var next choice
		for _, a := range out {
			for _, x := range c {
				next = append(next, append(slices.Clone(a), x...))
			}
		}
		out = next
	}
	return out
}

// disjointTuples reports whether no packet matches two elements: two
// elements are apart when some part of theirs is. A part bpfwall cannot
// place (an interface wildcard, a name it does not know) is taken to
// overlap, and the rule is rejected rather than risk firing twice.
func (b *ruleBuilder) disjointTuples(pos rules.Pos, keys []string, elems []elem) bool {
	for i, x := range elems {
		for _, y := range elems[i+1:] {
			if len(x.parts) != len(keys) || len(y.parts) != len(keys) {
				continue // tuple reports it
			}
			if !tuplesApart(keys, x, y) {
				b.unsupported(pos, "concatenation with overlapping elements")
				return false
			}
		}
	}
	return true
}

func partsApart(key string, x, y elem) bool {
	xl, xh, ok1 := partRange(key, x)
	yl, yh, ok2 := partRange(key, y)
	if !ok1 || !ok2 {
		return false
	}
	return bytes.Compare(xh, yl) < 0 || bytes.Compare(yh, xl) < 0
}

// partRange is the interval of values a part stands for, as big-endian
// bytes: addresses, prefixes and ranges of them, numbers and names of
// ports, protocols and icmp types, and plain strings (interface names).
func partRange(key string, e elem) ([]byte, []byte, bool) {
	if e.or != nil || e.ref != "" {
		return nil, nil, false
	}
	if a, err := netip.ParseAddr(e.lo); err == nil {
		lo, hi := a, a
		switch {
		case e.hasRange:
			if hi, err = netip.ParseAddr(e.hi); err != nil || hi.BitLen() != a.BitLen() {
				return nil, nil, false
			}
		case e.hasMask:
			p, err := prefixOf(e, famOfAddr(a))
			if err != nil {
				return nil, nil, false
			}
			lo, hi = prefixRange(p)
		}
		l, h := lo.As16(), hi.As16()
		return l[:], h[:], true
	}
	num := func(s string) (uint64, bool) {
		switch {
		case strings.HasSuffix(key, "sport"), strings.HasSuffix(key, "dport"):
			v, err := parsePort(s)
			return uint64(v), err == nil
		case strings.HasSuffix(key, "protocol"), strings.HasSuffix(key, "l4proto"):
			v, err := parseProto(s)
			return uint64(v), err == nil
		case key == "icmp type":
			v, err := lookupByte(icmpTypes, s)
			return uint64(v), err == nil
		case key == "icmpv6 type":
			v, err := lookupByte(icmpv6Types, s)
			return uint64(v), err == nil
		case strings.HasSuffix(key, "ifname"), strings.HasSuffix(key, "iif"), strings.HasSuffix(key, "oif"):
			return 0, false
		}
		v, err := parseNum(s, 64)
		return v, err == nil
	}
	if lo, ok := num(e.lo); ok && !e.hasMask {
		hi := lo
		if e.hasRange {
			if hi, ok = num(e.hi); !ok {
				return nil, nil, false
			}
		}
		return binary.BigEndian.AppendUint64(nil, lo), binary.BigEndian.AppendUint64(nil, hi), true
	}
	if e.hasRange || e.hasMask || strings.HasSuffix(e.lo, "*") {
		return nil, nil, false
	}
	// A name: equal names overlap, different ones do not. Numbers were
	// read above, so a name is not compared with a number's bytes.
	s := []byte("\xff" + e.lo)
	return s, s, true
}

func famOfAddr(a netip.Addr) rules.Family {
	if a.Is4() {
		return rules.IPv4
	}
	return rules.IPv6
}
