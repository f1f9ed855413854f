package ir

import (
	"encoding/binary"
	"math/big"
	"math/bits"
	"net/netip"
	"runtime"
	"slices"
	"sync"

	"bpfwall/rules"
)

// Field is a packet field that a Tuple constrains.
type Field uint8

const (
	FieldSrc Field = iota
	FieldDst
	FieldProto
	FieldSport
	FieldDport
	// FieldIn and FieldOut are the input and output devices, by the
	// number of the pattern their name matches among those the program's
	// -i and -o matches test and it numbers (Program.IfacePatterns): 0
	// for a device that matches none.
	FieldIn
	FieldOut
	NumFields
)

var fieldNames = []string{"src", "dst", "proto", "sport", "dport", "in", "out"}

func (f Field) String() string { return fieldNames[f] }

// Width is the field's size in bytes in a program of family fam.
func (f Field) Width(fam rules.Family) int {
	switch f {
	case FieldSrc, FieldDst:
		return fam.Bits() / 8
	case FieldProto, FieldIn, FieldOut:
		return 1
	}
	return 2
}

// Tuple is a conjunction of one prefix per field: the first Len[f] bits of
// field f, big-endian, equal those of Field(f). The fields are packed, an
// address in 16 bytes, a port in 2, the protocol in 1, and masked to Len,
// so equal tuples compare equal. A tuple is 46 bytes: the forms of a
// 100k-rule chain and the classifier's tables hold hundreds of thousands.
type Tuple struct {
	value [tupleSize]byte
	Len   [NumFields]uint8
}

// tupleSize is the packed fields' size; fieldOff and fieldSize place
// each field in it.
const tupleSize = 16 + 16 + 1 + 2 + 2 + 1 + 1

var (
	fieldOff  = [NumFields]uint8{FieldSrc: 0, FieldDst: 16, FieldProto: 32, FieldSport: 33, FieldDport: 35, FieldIn: 37, FieldOut: 38}
	fieldSize = [NumFields]uint8{FieldSrc: 16, FieldDst: 16, FieldProto: 1, FieldSport: 2, FieldDport: 2, FieldIn: 1, FieldOut: 1}
)

// Field returns the bytes of field f in t: an address's 16 (an IPv4
// address in the first 4), a port's 2, the protocol's 1. Bits past
// Len[f] are zero.
func (t *Tuple) Field(f Field) []byte {
	return t.value[fieldOff[f] : fieldOff[f]+fieldSize[f]]
}

// Covers reports whether every packet t matches u matches too.
func (t Tuple) Covers(u Tuple) bool {
	for f := range NumFields {
		if t.Len[f] > u.Len[f] || !prefixEqual(t.Field(f), u.Field(f), int(t.Len[f])) {
			return false
		}
	}
	return true
}

// Cut returns t with each field cut to at most lens[f] bits.
func (t Tuple) Cut(lens [NumFields]uint8) Tuple {
	for f := range NumFields {
		if lens[f] < t.Len[f] {
			t.Len[f] = lens[f]
			maskBits(t.Field(f), int(lens[f]))
		}
	}
	return t
}

// Form is a rule in the normal form of lookups: a disjunction of tuples,
// and what its matches before a dropping one test, for the packets that
// make it drop (hotdrop).
type Form struct {
	// Tuples match exactly the packets the rule's matches all hold for,
	// among those no match of the rule drops.
	Tuples []Tuple
	// Proto is set when the rule has a Proto match; PreProto are the
	// tuples of the matches before it. In IPv6, a packet whose extension
	// headers cannot be walked is dropped by the rule when PreProto match;
	// IPv4 has no such drop, and its forms no PreProto.
	Proto    bool
	PreProto []Tuple
	// L4Len is the Len of the rule's L4Header (0 without one), Tiny its
	// TinyFragDrop; PreL4 are the tuples of the matches before it. A
	// first fragment or unfragmented packet with fewer than L4Len bytes
	// of transport header (and, with Tiny, an IPv4 fragment at offset 8)
	// is dropped by the rule when PreL4 match; other fragments never
	// match it.
	L4Len int
	Tiny  bool
	PreL4 []Tuple
	// Residual are the rule's matches that no tuple expresses, in the
	// rule's order (NormalizeResidual); ResidualPreProto and ResidualPreL4
	// are how many of them come before the Proto and the L4Header match,
	// and so hold for the packets PreProto and PreL4 drop.
	Residual                        []Match
	ResidualPreProto, ResidualPreL4 int
}

// formLimit bounds the tuples of a rule's form (Program.Form).
const formLimit = 1 << 16

// Form is NormalizeResidual(r, formLimit), computed once per rule of p:
// the shadow pass and the classifier both ask for it. A rule's matches
// must not change once its form is computed, and no caller may change
// the form's tuples.
func (p *Program) Form(r *Rule) (Form, bool) {
	if p.forms == nil {
		p.forms = make([]*cachedForm, len(p.Rules))
	}
	c := p.forms[r.ID]
	if c == nil {
		f, ok := p.NormalizeResidual(r, formLimit)
		c = &cachedForm{ok: ok, tuples: f.Tuples, preL4: f.PreL4, l4Len: int32(f.L4Len), proto: f.Proto, tiny: f.Tiny}
		if len(f.PreProto) > 0 || len(f.Residual) > 0 {
			c.more = &formMore{f.PreProto, f.Residual, f.ResidualPreProto, f.ResidualPreL4}
		}
		p.forms[r.ID] = c
	}
	if !c.ok {
		return Form{}, false
	}
	f := Form{Tuples: c.tuples, PreL4: c.preL4, L4Len: int(c.l4Len), Proto: c.proto, Tiny: c.tiny}
	if m := c.more; m != nil {
		f.PreProto, f.Residual, f.ResidualPreProto, f.ResidualPreL4 = m.preProto, m.residual, m.residualPreProto, m.residualPreL4
	}
	return f, true
}

// ForgetForms lets the cached forms of rs go, for a caller that is done
// with them; Form computes a form again if it is asked for once more.
func (p *Program) ForgetForms(rs []*Rule) {
	for _, r := range rs {
		if r.ID < len(p.forms) {
			p.forms[r.ID] = nil
		}
	}
}

// parallelForms is the rule count from which Forms computes the forms
// on every CPU: below it, starting the goroutines costs more than it saves.
const parallelForms = 4096

// Forms computes the Form of every rule of rs at once, on every CPU when
// there are many: the forms of different rules are independent, and
// computing them was a tenth of a 100k-rule compile. Nothing may read the
// rules' forms while it runs.
func (p *Program) Forms(rs []*Rule) {
	if p.forms == nil {
		p.forms = make([]*cachedForm, len(p.Rules))
	}
	p.ifaceNumbers() // before the workers read it
	workers := min(runtime.GOMAXPROCS(0), len(rs)/parallelForms)
	if workers < 2 {
		for _, r := range rs {
			p.Form(r)
		}
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		part := rs[w*len(rs)/workers : (w+1)*len(rs)/workers]
		wg.Go(func() {
			for _, r := range part {
				p.Form(r)
			}
		})
	}
	wg.Wait()
}

// NormalizeResidual returns the rule's normal form: its tuples, and in
// Form.Residual the matches that have none (negations, non-contiguous
// masks, sets with nomatch entries, matches on other fields); the rule
// matches the packets its tuples and its residual matches all hold for.
// It fails only for more than one L4Header or more than limit tuples.
func (p *Program) NormalizeResidual(r *Rule, limit int) (Form, bool) {
	var f Form
	cur := []Tuple{{}}
	var buf [4]alt // the alternatives of most matches
	for _, m := range r.Matches {
		// Proto and L4Header shape the form; every other match is a
		// tupleMatch or a residual check.
		if pm, ok := m.(Proto); ok {
			if pm.Neg || pm.Proto == 0 || f.Proto {
				f.Residual = append(f.Residual, m)
				continue
			}
			f.Proto, f.ResidualPreProto = true, len(f.Residual)
			if p.Family == rules.IPv6 {
				f.PreProto = slices.Clone(cur)
			}
			buf[0] = alt{FieldProto, prefixOf([]byte{pm.Proto}, 8)}
			cur = restrict(cur, buf[:1])
		} else if lh, ok := m.(L4Header); ok {
			if f.L4Len != 0 {
				return Form{}, false
			}
			f.L4Len, f.Tiny, f.PreL4, f.ResidualPreL4 = lh.Len, lh.TinyFragDrop, slices.Clone(cur), len(f.Residual)
		} else {
			t, ok := m.(tupleMatch)
			var alts []alt
			if ok {
				alts, ok = t.alternatives(p, buf[:0], limit)
			}
			if !ok {
				f.Residual = append(f.Residual, m)
				continue
			}
			cur = restrict(cur, alts)
		}
		if len(cur) > limit {
			return Form{}, false
		}
	}
	f.Tuples = dedupTuples(cur)
	f.PreProto = dedupTuples(f.PreProto)
	f.PreL4 = dedupTuples(f.PreL4)
	return f, true
}

// alt is one alternative of a match: a prefix of one field.
type alt struct {
	field Field
	p     fieldPrefix
}

type fieldPrefix struct {
	value [16]byte
	bits  int
}

func prefixOf(b []byte, bits int) fieldPrefix {
	var fp fieldPrefix
	copy(fp.value[:], b)
	maskBits(fp.value[:], bits)
	fp.bits = bits
	return fp
}

// A tupleMatch is a match that tests fields of the tuple (addresses,
// ports). Other matches are residual checks.
type tupleMatch interface {
	// alternatives appends to out the prefixes one of which the packet's
	// field must be in for m to hold; false when m is not one of them
	// (negated, or too many).
	alternatives(p *Program, out []alt, limit int) ([]alt, bool)
}

func addrField(d Dir) Field {
	if d == Dst {
		return FieldDst
	}
	return FieldSrc
}

// restrict returns the tuples of ts that also hold one of alts: the
// intersection of prefixes of one field is the longer one, or empty. ts
// is the caller's: with one alternative, it is restricted in place.
func restrict(ts []Tuple, alts []alt) []Tuple {
	out := ts[:0]
	if len(alts) != 1 {
		out = make([]Tuple, 0, len(ts)*len(alts))
	}
	for _, t := range ts {
		for _, a := range alts {
			f := a.field
			short, long := int(t.Len[f]), a.p.bits
			if !prefixEqual(t.Field(f), a.p.value[:], min(short, long)) {
				continue
			}
			u := t
			if long > short {
				copy(u.Field(f), a.p.value[:])
				u.Len[f] = uint8(long)
			}
			out = append(out, u)
		}
	}
	return out
}

// dedupTuples removes repeated tuples from ts, keeping the first of each,
// in place: ts is always a slice the caller owns.
func dedupTuples(ts []Tuple) []Tuple {
	if len(ts) > maxDedupScan {
		seen := make(map[Tuple]struct{}, len(ts))
		out := ts[:0]
		for _, t := range ts {
			if _, ok := seen[t]; !ok {
				seen[t] = struct{}{}
				out = append(out, t)
			}
		}
		return out
	}
	// Rules expand into few tuples, rarely repeated: comparing each with
	// the ones kept costs less than a map per rule.
	out := ts[:0]
	for _, t := range ts {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// maxDedupScan is the most tuples dedupTuples compares pairwise.
const maxDedupScan = 32

// prefixEqual reports whether a and b agree in their first bits bits.
func prefixEqual(a, b []byte, bits int) bool {
	for i := 0; bits > 0; i, bits = i+1, bits-8 {
		mask := byte(0xff)
		if bits < 8 {
			mask = 0xff << (8 - bits)
		}
		if (a[i]^b[i])&mask != 0 {
			return false
		}
	}
	return true
}

// maskBits clears the bits of b after the first bits.
func maskBits(b []byte, bits int) {
	for i := range b {
		switch {
		case bits >= 8:
		case bits > 0:
			b[i] &= 0xff << (8 - bits)
		default:
			b[i] = 0
		}
		bits -= 8
	}
}

// rangePrefixes appends to out the fewest prefixes that make up the
// range lo..hi of big-endian numbers of len(lo) bytes: at most 2*bits-2
// of them. (A caller may pass a buffer of its own: a port range takes at
// most 30, and lowering 100k port matches allocated a slice for each.)
func rangePrefixes(out []fieldPrefix, lo, hi []byte) []fieldPrefix {
	width := len(lo) * 8
	if width <= 32 {
		var l, h uint64
		for i := range lo {
			l, h = l<<8|uint64(lo[i]), h<<8|uint64(hi[i])
		}
		for l <= h {
			k := 0 // the largest aligned block at l within the range
			for k < width && l&(1<<(k+1)-1) == 0 && l+(1<<(k+1))-1 <= h {
				k++
			}
			var v [16]byte
			for i := range lo {
				v[i] = byte(l >> (8 * (len(lo) - 1 - i)))
			}
			out = append(out, fieldPrefix{value: v, bits: width - k})
			l += 1 << k
			if l == 0 {
				break
			}
		}
		return out
	}
	l, h := new(big.Int).SetBytes(lo), new(big.Int).SetBytes(hi)
	one := big.NewInt(1)
	for l.Cmp(h) <= 0 {
		k := 0
		for k < width {
			size := new(big.Int).Lsh(one, uint(k+1))
			if new(big.Int).Mod(l, size).Sign() != 0 || new(big.Int).Sub(new(big.Int).Add(l, size), one).Cmp(h) > 0 {
				break
			}
			k++
		}
		var v [16]byte
		l.FillBytes(v[:len(lo)])
		out = append(out, fieldPrefix{value: v, bits: width - k})
		l.Add(l, new(big.Int).Lsh(one, uint(k)))
	}
	return out
}

// TupleString prints a tuple for dumps and messages.
func TupleString(fam rules.Family, t Tuple) string {
	var b []byte
	for f := range NumFields {
		if t.Len[f] == 0 {
			continue
		}
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, f.String()...)
		b = append(b, ' ')
		w := f.Width(fam)
		switch f {
		case FieldSrc, FieldDst:
			a, _ := netip.AddrFromSlice(t.Field(f)[:w])
			b = append(b, netip.PrefixFrom(a, int(t.Len[f])).String()...)
		default:
			v := 0
			for _, x := range t.Field(f)[:w] {
				v = v<<8 | int(x)
			}
			b = appendInt(b, v)
			if int(t.Len[f]) != 8*w {
				b = append(b, '/')
				b = appendInt(b, int(t.Len[f]))
			}
		}
	}
	if len(b) == 0 {
		return "any"
	}
	return string(b)
}

func appendInt(b []byte, v int) []byte { return big.NewInt(int64(v)).Append(b, 10) }

// A cutHasher hashes tuples cut to one shape (Tuple.Cut(lens)) without
// cutting them: the value's words are masked to the shape's lengths and
// mixed with them. Tuples of the shape itself hash as their cuts do. It
// is the shadow pass's probe, made millions of times at 100k rules, where
// a cut and a hash of the whole struct cost as much as the rest.
type cutHasher struct {
	lens  [NumFields]uint8
	masks [tupleWords]uint64
	shape uint64 // the lengths, as one word
}

// tupleWords is how many words hold a tuple's value; the last one
// overlaps the one before it.
const tupleWords = 5

func newCutHasher(lens [NumFields]uint8) cutHasher {
	full := Tuple{Len: [NumFields]uint8{128, 128, 8, 16, 16}}
	for i := range full.value {
		full.value[i] = 0xff
	}
	m := full.Cut(lens)
	h := cutHasher{lens: lens, masks: m.words()}
	for _, l := range lens {
		h.shape = h.shape<<8 | uint64(l)
	}
	return h
}

// words returns the tuple's value as words: bytes 0–31, then 29–36.
func (t *Tuple) words() [tupleWords]uint64 {
	return [tupleWords]uint64{
		binary.LittleEndian.Uint64(t.value[0:8]),
		binary.LittleEndian.Uint64(t.value[8:16]),
		binary.LittleEndian.Uint64(t.value[16:24]),
		binary.LittleEndian.Uint64(t.value[24:32]),
		binary.LittleEndian.Uint64(t.value[tupleSize-8 : tupleSize]),
	}
}

// hash returns the hash of t.Cut(h.lens), for t that fits the shape
// (its lengths at least the shape's), salted with seed.
func (h *cutHasher) hash(t *Tuple, seed uint64) uint64 {
	// The words are mixed apart, so that the multiplies run at once,
	// then a finalizer (murmur3's) spreads every bit over the high and
	// the low bits, which flatidx uses apart.
	w := t.words()
	x := seed ^ h.shape ^
		(w[0]&h.masks[0])*0x9e3779b97f4a7c15 ^
		bits.RotateLeft64((w[1]&h.masks[1])*0xc2b2ae3d27d4eb4f, 13) ^
		bits.RotateLeft64((w[2]&h.masks[2])*0x165667b19e3779f9, 26) ^
		bits.RotateLeft64((w[3]&h.masks[3])*0x27d4eb2f165667c5, 39) ^
		bits.RotateLeft64((w[4]&h.masks[4])*0x85ebca77c2b2ae63, 52)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	return x ^ x>>33
}
