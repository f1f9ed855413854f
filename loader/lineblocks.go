package loader

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// lineBlocks is a text of lines in blocks of whole lines, which pack
// (flate, each alone) to hold a MetaSource's rule set while a restore
// compiles: a restore keeps it from the parse to the swap, where it was
// the largest thing after the program and its tables (bench's realistic
// 1M: 76 MB as text, 12 MB packed). A line is read by unpacking its
// block, the last of which stays unpacked for the next line. Before
// pack, the blocks are views of the text.
type lineBlocks struct {
	size   int // the text's length
	blocks []lineBlock

	mu   sync.Mutex
	last unpackedBlock
	u    unpacker // line's
}

// lineBlock is the lines from line (from 1) on, size bytes: data, or
// data packed.
type lineBlock struct {
	line, size int
	data       []byte
	packed     bool
}

// unpackedBlock is block i unpacked, and where each of its lines starts.
type unpackedBlock struct {
	i      int
	text   string
	starts []int32
}

// lineBlockSize is about how many bytes of text a block holds: large
// enough for flate to find what repeats (a rule set packs 6:1), small
// enough that unpacking one for a line costs little.
const lineBlockSize = 256 << 10

// newLineBlocks cuts text into blocks; they view it.
func newLineBlocks(text []byte) *lineBlocks {
	t := &lineBlocks{size: len(text), last: unpackedBlock{i: -1}}
	line := 1
	for len(text) > 0 {
		n := min(len(text), lineBlockSize)
		if i := bytes.IndexByte(text[n-1:], '\n'); i >= 0 {
			n += i // the block ends with its last line
		} else {
			n = len(text)
		}
		t.blocks = append(t.blocks, lineBlock{line: line, size: n, data: text[:n:n]})
		line += bytes.Count(text[:n], []byte{'\n'})
		text = text[n:]
	}
	return t
}

// pack packs the blocks; they no longer view the text. It must return
// before the blocks are read.
func (t *lineBlocks) pack() {
	t.mu.Lock()
	defer t.mu.Unlock()
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestSpeed) // a valid level: no error
	for i := range t.blocks {
		b := &t.blocks[i]
		if b.packed {
			continue
		}
		buf.Reset()
		w.Reset(&buf)
		w.Write(b.data) // a bytes.Buffer does not fail
		w.Close()
		b.data, b.packed = bytes.Clone(buf.Bytes()), true
	}
	t.last = unpackedBlock{i: -1}
}

// unpacker unpacks blocks; one reused for many blocks keeps its window
// (32 KiB).
type unpacker struct{ r io.ReadCloser }

// unpack returns b unpacked, in a buffer of its own; a block not packed
// as it is.
func (u *unpacker) unpack(b *lineBlock) ([]byte, error) {
	if !b.packed {
		return b.data, nil
	}
	src := bytes.NewReader(b.data)
	if u.r == nil {
		u.r = flate.NewReader(src)
	} else if err := u.r.(flate.Resetter).Reset(src, nil); err != nil {
		return nil, err
	}
	out := make([]byte, b.size)
	if _, err := io.ReadFull(u.r, out); err != nil {
		return nil, err
	}
	return out, nil
}

// line returns line n (from 1), without its newline; false past the end.
func (t *lineBlocks) line(n int) (string, bool, error) {
	i := sort.Search(len(t.blocks), func(i int) bool { return t.blocks[i].line > n }) - 1
	if i < 0 || n < 1 {
		return "", false, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last.i != i {
		b, err := t.u.unpack(&t.blocks[i])
		if err != nil {
			return "", false, fmt.Errorf("unpack block %d of the rule set: %w", i, err)
		}
		text := unsafe.String(unsafe.SliceData(b), len(b)) // nothing writes b again
		starts := []int32{0}
		for j := 0; j < len(text); j++ {
			if text[j] == '\n' {
				starts = append(starts, int32(j+1))
			}
		}
		t.last = unpackedBlock{i: i, text: text, starts: starts}
	}
	k := n - t.blocks[i].line
	if k >= len(t.last.starts) || int(t.last.starts[k]) == len(t.last.text) {
		return "", false, nil
	}
	line, _, _ := strings.Cut(t.last.text[t.last.starts[k]:], "\n")
	return line, true, nil
}

// String returns the whole text.
func (t *lineBlocks) String() (string, error) {
	var out strings.Builder
	out.Grow(t.size)
	var u unpacker
	for i := range t.blocks {
		b, err := u.unpack(&t.blocks[i])
		if err != nil {
			return "", fmt.Errorf("unpack block %d of the rule set: %w", i, err)
		}
		out.Write(b)
	}
	return out.String(), nil
}
