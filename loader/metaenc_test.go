package loader

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func testMeta(rules int) Meta {
	m := Meta{
		Table: "filter", Chain: "INPUT", File: "rules.v4",
		Source:        "*filter\n:INPUT DROP [0:0]\n",
		Sets:          "create s hash:ip family inet\n",
		LoadedAt:      time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC),
		VerifiedInsns: 4680, Level: "-O1", Instructions: 933,
		Ifaces:  []Iface{{Name: "eth0", Index: 2}},
		Family:  "ipv4",
		Pins:    []string{"program", "meta"},
		Lines:   []int{},
		Origins: nil,
	}
	if err := m.setFeature(metaRecent, []RecentMeta{{Name: "DEFAULT", Stamps: 20, Mask: "255.255.255.255"}}); err != nil {
		panic(err)
	}
	for i := range rules {
		m.Source += "-A INPUT -p tcp -m tcp --dport " + strings.Repeat("1", i%5+1) + " -j ACCEPT \"quoted\\n\"\n"
		m.Lines = append(m.Lines, 3+i)
		m.Origins = append(m.Origins, "rules.v4:"+strings.Repeat("7", i%3+1))
	}
	return m
}

// TestMetaEncoding: a meta reads back as it was written, in whole chunks,
// large or without rules; pins written as JSON by older versions read too.
func TestMetaEncoding(t *testing.T) {
	for _, n := range []int{0, 1, 3000} {
		m := testMeta(n)
		b, err := encodeMeta(&m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 || len(b)%metaChunk != 0 {
			t.Fatalf("%d rules: %d bytes, not whole chunks of %d", n, len(b), metaChunk)
		}
		got, err := decodeMeta(b)
		if err != nil {
			t.Fatalf("%d rules: %v", n, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%d rules: read back\n%+v\nwant\n%+v", n, got, m)
		}
		if r := got.RecentMetas(); len(r) != 1 || r[0].Name != "DEFAULT" || len(got.LogRules()) != 0 || got.HoldsConntrack() {
			t.Errorf("%d rules: features read back as recent %v, logs %v, conntrack %v", n, r, got.LogRules(), got.HoldsConntrack())
		}
		// An older version's pin: Meta as JSON, the recent tables a
		// field of it.
		old, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		old = withFeatures(old, m.features)
		if !bytes.Contains(old, []byte(`,"recent":[{"name":"DEFAULT","stamps":20,`)) {
			t.Fatalf("%d rules: the recent tables are not a field of the meta's JSON: %s", n, old)
		}
		old = append(old, make([]byte, metaChunk-len(old)%metaChunk)...)
		if got, err := decodeMeta(old); err != nil || !reflect.DeepEqual(got, m) {
			t.Errorf("%d rules: JSON pin read back as %+v, %v", n, got, err)
		}
		if n > 0 {
			// The JSON part holds none of what grows with the rule set.
			head := b[len(metaMagic)+4:]
			if bytes.Contains(head[:bytes.IndexByte(head, 0)], []byte(`"source"`)) {
				t.Errorf("%d rules: source in the JSON part", n)
			}
		}
	}
}

// TestMetaCutShort: a meta cut anywhere is an error, not a panic or a
// meta with fewer rules.
func TestMetaCutShort(t *testing.T) {
	m := testMeta(50)
	b, err := encodeMeta(&m)
	if err != nil {
		t.Fatal(err)
	}
	end := len(b) - len(bytes.TrimRight(b, "\x00")) // the padding
	full := len(b) - end
	for cut := 0; cut < full; cut += 7 {
		if _, err := decodeMeta(b[:cut]); err == nil {
			t.Fatalf("cut at %d of %d bytes: no error", cut, full)
		}
	}
}

// TestMetaHead: the head of a meta reads from the chunks that hold it,
// the same as the whole meta without its rule set, lines and origins,
// even when the head spans several chunks; a JSON pin has no head to
// read alone.
func TestMetaHead(t *testing.T) {
	m := testMeta(3000)
	// LOG rules make the head longer than a chunk.
	var logs []LogRule
	for i := range 2000 {
		logs = append(logs, LogRule{ID: i, Prefix: strings.Repeat("p", 40)})
	}
	if err := m.setFeature(metaLogs, logs); err != nil {
		t.Fatal(err)
	}
	b, err := encodeMeta(&m)
	if err != nil {
		t.Fatal(err)
	}
	want := m
	want.Source, want.Lines, want.Origins = "", nil, nil
	read := 0
	for k := 1; k <= len(b)/metaChunk; k++ {
		got, ok, err := decodeMetaHead(b[:k*metaChunk])
		if err != nil {
			t.Fatalf("%d chunks: %v", k, err)
		}
		if !ok {
			continue
		}
		read = k
		if !reflect.DeepEqual(got, want) {
			t.Errorf("head read back\n%+v\nwant\n%+v", got, want)
		}
		if len(got.LogRules()) != len(logs) {
			t.Errorf("head holds %d LOG rules, want %d", len(got.LogRules()), len(logs))
		}
		break
	}
	if read < 2 || read == len(b)/metaChunk {
		t.Errorf("the head read from %d of %d chunks: want more than one, fewer than all", read, len(b)/metaChunk)
	}
	old, err := json.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := decodeMetaHead(append(old, make([]byte, metaChunk-len(old)%metaChunk)...)); ok || err != nil {
		t.Errorf("a JSON pin read as a head: %v, %v", ok, err)
	}
}

// encodeMetaRaw writes m in the second encoding, which pins of versions
// up to 2026-12-07 hold: Source as it is.
func encodeMetaRaw(t *testing.T, m *Meta) []byte {
	t.Helper()
	head, err := json.Marshal(metaHead{Meta: *m})
	if err != nil {
		t.Fatal(err)
	}
	head = withFeatures(head, m.features)
	var b []byte
	u32 := func(v int) { b = binary.LittleEndian.AppendUint32(b, uint32(v)) }
	b = append(b, metaMagicRaw...)
	u32(len(head))
	b = append(b, head...)
	u32(len(m.Source))
	b = append(b, m.Source...)
	u32(4 * len(m.Lines))
	for _, l := range m.Lines {
		u32(l)
	}
	n := 0
	for _, o := range m.Origins {
		n += 4 + len(o)
	}
	u32(n)
	for _, o := range m.Origins {
		u32(len(o))
		b = append(b, o...)
	}
	return append(b, make([]byte, metaChunk-len(b)%metaChunk)...)
}

// TestMetaRawSource: pins of the second encoding, the rule set as it is,
// read back whole and by their head; and a third-encoding source with a
// block of an unknown kind, or one that holds less than it says, is an
// error.
func TestMetaRawSource(t *testing.T) {
	for _, n := range []int{0, 1, 3000} {
		m := testMeta(n)
		b := encodeMetaRaw(t, &m)
		got, err := decodeMeta(b)
		if err != nil {
			t.Fatalf("%d rules: %v", n, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%d rules: read back\n%+v\nwant\n%+v", n, got, m)
		}
		head, ok, err := decodeMetaHead(b)
		if err != nil || !ok || head.Table != m.Table || head.Source != "" {
			t.Errorf("%d rules: head %+v, %v, %v", n, head, ok, err)
		}
	}
	good := []byte{metaRaw, 3, 0, 0, 0, 3, 0, 0, 0, 'a', 'b', 'c'}
	if s, err := decodeSource(good); err != nil || s != "abc" {
		t.Fatalf("decodeSource: %q, %v", s, err)
	}
	for _, bad := range [][]byte{
		{7, 3, 0, 0, 0, 3, 0, 0, 0, 'a', 'b', 'c'},         // kind 7
		{metaRaw, 4, 0, 0, 0, 3, 0, 0, 0, 'a', 'b', 'c'},   // 3 bytes of 4
		{metaRaw, 3, 0, 0, 0, 4, 0, 0, 0, 'a', 'b', 'c'},   // cut short
		{metaFlate, 3, 0, 0, 0, 3, 0, 0, 0, 'a', 'b', 'c'}, // not flate
		{metaRaw, 3, 0, 0},
		{metaFlate, 0, 0, 0, 0x80, 3, 0, 0, 0, 'a', 'b', 'c'}, // says 2 GiB
	} {
		if s, err := decodeSource(bad); err == nil {
			t.Errorf("decodeSource(%v) = %q, no error", bad, s)
		}
	}
}
