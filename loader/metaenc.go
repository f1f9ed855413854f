package loader

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// The meta map holds Meta in one of three encodings, in chunks of
// metaChunk bytes, zero-padded:
//
//   - JSON (pins of versions before 2026-12), starting with '{';
//   - metaMagicRaw (pins of versions up to 2026-12-07), then sections,
//     each a little-endian u32 length and that many bytes: Meta as JSON
//     without Source, Lines and Origins; Source as it is; Lines as u32s;
//     Origins, each a u32 length and its bytes;
//   - metaMagic, then the same sections, but for Source's blocks of
//     lines, each a kind (metaRaw or metaFlate), the u32 length of its
//     text and the u32 length and bytes of what is stored.
//
// The second and third keep the rule set, which is most of a large
// filter's meta, out of JSON: encoding and decoding 100k rules' meta as
// JSON took a quarter of a second each, and a swap does both. The third
// stores the blocks a restore packed (MetaSource.Pack) as they are:
// unpacking them into the map was 0.23 s of a 1M-rule swap, and they
// are a sixth of the text in the kernel's memory.
var (
	metaMagic    = []byte("BWM\x03")
	metaMagicRaw = []byte("BWM\x02")
)

// The kinds of a Source block in a meta.
const (
	metaRaw   = 0
	metaFlate = 1
)

// metaHead is what the JSON section of a meta holds: Meta without the
// fields that grow with the rule set.
type metaHead struct {
	Meta
	Source  string   `json:"source,omitempty"`
	Lines   []int    `json:"lines,omitempty"`
	Origins []string `json:"origins,omitempty"`
}

// encodeMeta returns m in the second encoding, padded to whole chunks.
func encodeMeta(m *Meta) ([]byte, error) {
	var b []byte
	err := writeMeta(m, func(n int) {
		b = make([]byte, 0, n*metaChunk)
	}, func(_ uint32, chunk []byte) error {
		b = append(b, chunk...)
		return nil
	})
	return b, err
}

// writeMeta encodes m in the second encoding and hands it to put in
// chunks of metaChunk bytes, the last one zero-padded, after telling
// chunks how many there are. A large meta is not held whole: at 1M rules
// it is about 100 MB, whose first touch alone took a quarter of a second.
func writeMeta(m *Meta, chunks func(n int), put func(i uint32, chunk []byte) error) error {
	head, err := json.Marshal(metaHead{Meta: *m})
	if err != nil {
		return fmt.Errorf("encode meta: %w", err)
	}
	head = withFeatures(head, m.features)
	origins := 0
	for _, o := range m.Origins {
		origins += 4 + len(o)
	}
	source := 0
	if m.text != nil {
		for _, b := range m.text.blocks {
			source += 9 + len(b.data)
		}
	} else if len(m.Source) > 0 {
		source = 9 + len(m.Source)
	}
	size := len(metaMagic) + 4 + len(head) + 4 + source + 4 + 4*len(m.Lines) + 4 + origins
	chunks((size + metaChunk - 1) / metaChunk)
	w := chunkWriter{buf: make([]byte, 0, metaChunk), put: put}
	w.write(metaMagic)
	w.u32(len(head))
	w.write(head)
	w.u32(source)
	block := func(kind byte, size, n int) {
		w.write([]byte{kind})
		w.u32(size)
		w.u32(n)
	}
	if m.text != nil {
		for _, b := range m.text.blocks {
			kind := byte(metaRaw)
			if b.packed {
				kind = metaFlate
			}
			block(kind, b.size, len(b.data))
			w.write(b.data)
		}
	} else if len(m.Source) > 0 {
		block(metaRaw, len(m.Source), len(m.Source))
		w.writeString(m.Source)
	}
	w.u32(4 * len(m.Lines))
	for _, l := range m.Lines {
		w.u32(l)
	}
	w.u32(origins)
	for _, o := range m.Origins {
		w.u32(len(o))
		w.writeString(o)
	}
	return w.close()
}

// chunkWriter cuts what is written to it into chunks of metaChunk bytes.
type chunkWriter struct {
	buf  []byte // the chunk being filled
	next uint32
	put  func(i uint32, chunk []byte) error
	err  error
}

func (w *chunkWriter) write(p []byte) { writeChunks(w, p) }

// writeString writes s without a copy of it ([]byte(s) would copy the
// rule set).
func (w *chunkWriter) writeString(s string) { writeChunks(w, s) }

func writeChunks[T string | []byte](w *chunkWriter, p T) {
	for len(p) > 0 && w.err == nil {
		n := copy(w.buf[len(w.buf):metaChunk], p)
		w.buf, p = w.buf[:len(w.buf)+n], p[n:]
		if len(w.buf) == metaChunk {
			w.flush()
		}
	}
}

func (w *chunkWriter) u32(v int) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(v))
	w.write(b[:])
}

func (w *chunkWriter) flush() {
	if w.err == nil {
		w.err = w.put(w.next, w.buf)
	}
	w.next++
	w.buf = w.buf[:0]
}

// close pads and puts the last chunk, and returns the first error.
func (w *chunkWriter) close() error {
	if len(w.buf) > 0 {
		n := len(w.buf)
		w.buf = w.buf[:metaChunk]
		clear(w.buf[n:])
		w.flush()
	}
	return w.err
}

// decodeMeta reads a meta in any of the three encodings.
func decodeMeta(b []byte) (Meta, error) {
	var m Meta
	if !sectioned(b) {
		obj := bytes.TrimRight(b, "\x00")
		if err := json.Unmarshal(obj, &m); err != nil {
			return Meta{}, fmt.Errorf("decode meta: %w", err)
		}
		var err error
		if m.features, err = featuresOf(obj); err != nil {
			return Meta{}, fmt.Errorf("decode meta: %w", err)
		}
		return m, nil
	}
	rawSource := bytes.HasPrefix(b, metaMagicRaw)
	b = b[len(metaMagic):]
	var sections [4][]byte
	for i := range sections {
		if len(b) < 4 || uint64(binary.LittleEndian.Uint32(b)) > uint64(len(b)-4) {
			return Meta{}, errors.New("decode meta: cut short")
		}
		n := binary.LittleEndian.Uint32(b)
		sections[i], b = b[4:4+n], b[4+n:]
	}
	m, err := decodeHead(sections[0])
	if err != nil {
		return Meta{}, err
	}
	if rawSource {
		m.Source = string(sections[1])
	} else if m.Source, err = decodeSource(sections[1]); err != nil {
		return Meta{}, err
	}
	if len(sections[2])%4 != 0 {
		return Meta{}, errors.New("decode meta: lines cut short")
	}
	m.Lines = make([]int, len(sections[2])/4)
	for i := range m.Lines {
		m.Lines[i] = int(binary.LittleEndian.Uint32(sections[2][4*i:]))
	}
	// The origins are substrings of one string: one allocation for all.
	raw, all := sections[3], string(sections[3])
	if len(raw) > 0 {
		m.Origins = make([]string, 0, len(m.Lines))
	}
	for at := 0; at < len(raw); {
		if len(raw)-at < 4 || uint64(binary.LittleEndian.Uint32(raw[at:])) > uint64(len(raw)-at-4) {
			return Meta{}, errors.New("decode meta: origins cut short")
		}
		n := int(binary.LittleEndian.Uint32(raw[at:]))
		m.Origins = append(m.Origins, all[at+4:at+4+n])
		at += 4 + n
	}
	return m, nil
}

// sectioned reports whether b, a meta or its start, is in the second or
// third encoding.
func sectioned(b []byte) bool {
	return bytes.HasPrefix(b, metaMagic) || bytes.HasPrefix(b, metaMagicRaw)
}

// decodeSource reads the Source section of a meta in the third
// encoding: its blocks' texts, one after the other.
func decodeSource(section []byte) (string, error) {
	var lb lineBlocks
	for b := section; len(b) > 0; {
		if len(b) < 9 || uint64(binary.LittleEndian.Uint32(b[5:])) > uint64(len(b)-9) {
			return "", errors.New("decode meta: source cut short")
		}
		kind := b[0]
		size, n := int(binary.LittleEndian.Uint32(b[1:])), int(binary.LittleEndian.Uint32(b[5:]))
		i := len(lb.blocks)
		switch {
		case kind == metaRaw && n != size:
			return "", fmt.Errorf("decode meta: source block %d holds %d bytes of %d", i, n, size)
		case kind == metaFlate && size > 1032*n:
			// No flate stream inflates more than 1032 times: a damaged
			// pin's, which would have the text allocated.
			return "", fmt.Errorf("decode meta: source block %d: %d bytes cannot inflate to %d", i, n, size)
		case kind != metaRaw && kind != metaFlate:
			return "", fmt.Errorf("decode meta: source block %d of kind %d", i, kind)
		}
		lb.blocks = append(lb.blocks, lineBlock{size: size, data: b[9 : 9+n], packed: kind == metaFlate})
		lb.size += size
		b = b[9+n:]
	}
	text, err := lb.String()
	if err != nil {
		return "", fmt.Errorf("decode meta: source: %w", err)
	}
	return text, nil
}

// decodeHead reads the JSON section of a meta in the second encoding.
func decodeHead(section []byte) (Meta, error) {
	var head metaHead
	err := json.Unmarshal(section, &head)
	if err != nil {
		return Meta{}, fmt.Errorf("decode meta: %w", err)
	}
	m := head.Meta
	if m.features, err = featuresOf(section); err != nil {
		return Meta{}, fmt.Errorf("decode meta: %w", err)
	}
	return m, nil
}

// decodeMetaHead reads the start of a meta in the second encoding, b, as
// far as its JSON section: Meta without the rule set, its lines and its
// origins. ok is false when b is in the first encoding, or does not hold
// the whole section.
func decodeMetaHead(b []byte) (m Meta, ok bool, err error) {
	if !sectioned(b) {
		return Meta{}, false, nil
	}
	b = b[len(metaMagic):]
	if len(b) < 4 || uint64(binary.LittleEndian.Uint32(b)) > uint64(len(b)-4) {
		return Meta{}, false, nil
	}
	m, err = decodeHead(b[4 : 4+binary.LittleEndian.Uint32(b)])
	return m, err == nil, err
}

// withFeatures returns the JSON object obj with each feature's record
// added as a field: where fields of Meta held them before the features
// did, so that pins of either version read the same.
func withFeatures(obj []byte, features map[string]json.RawMessage) []byte {
	for _, key := range slices.Sorted(maps.Keys(features)) {
		name, _ := json.Marshal(key)
		obj = obj[:len(obj)-1] // its closing brace
		if len(obj) > 1 {
			obj = append(obj, ',')
		}
		obj = append(append(append(obj, name...), ':'), features[key]...)
		obj = append(obj, '}')
	}
	return obj
}

// featuresOf reads the features' records from the JSON object obj: its
// fields that are not Meta's own.
func featuresOf(obj []byte) (map[string]json.RawMessage, error) {
	var all map[string]json.RawMessage
	if err := json.Unmarshal(obj, &all); err != nil {
		return nil, err
	}
	for key := range all {
		if metaFields[key] {
			delete(all, key)
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	return all, nil
}

// metaFields are the JSON names of Meta's own fields.
var metaFields = func() map[string]bool {
	out := make(map[string]bool)
	t := reflect.TypeFor[Meta]()
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			out[name] = true
		}
	}
	return out
}()
