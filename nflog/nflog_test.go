package nflog_test

import (
	"bufio"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"bpfwall/nflog"
)

// kernelCase is a frame, its LOG rule and the line the kernel printed.
type kernelCase struct {
	frame []byte
	rule  nflog.Rule
	in    string
	out   string
	line  string
	at    string
}

// readKernelCases reads testdata/kernel_*.txt, written by
// TestLogMatchesKernel from the kernel's own lines.
func readKernelCases(t *testing.T) []kernelCase {
	t.Helper()
	files, err := filepath.Glob("testdata/kernel_*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no kernel lines in testdata: %v", err)
	}
	var out []kernelCase
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		var c kernelCase
		n := 0
		for sc.Scan() {
			n++
			key, val, _ := strings.Cut(sc.Text(), " ")
			switch key {
			case "frame":
				c = kernelCase{at: file + ":" + strconv.Itoa(n)}
				if c.frame, err = hex.DecodeString(val); err != nil {
					t.Fatalf("%s: %v", c.at, err)
				}
			case "rule":
				i := strings.LastIndex(val, `" `)
				prefix, err := strconv.Unquote(val[:i+1])
				if err != nil {
					t.Fatalf("%s: %v", c.at, err)
				}
				var level, flags int
				f := strings.Fields(val[i+2:])
				level, _ = strconv.Atoi(f[0])
				flags, _ = strconv.Atoi(f[1])
				c.rule = nflog.Rule{Prefix: prefix, Level: uint8(level), Flags: uint8(flags)}
			case "in":
				c.in = val
			case "out":
				c.out = val
			case "line":
				c.line = val
				out = append(out, c)
			}
		}
		f.Close()
	}
	return out
}

// TestKernelLines formats every frame the kernel logged and compares with
// the kernel's line.
func TestKernelLines(t *testing.T) {
	cases := readKernelCases(t)
	if len(cases) < 40 {
		t.Fatalf("only %d kernel lines", len(cases))
	}
	for _, c := range cases {
		got, err := nflog.Line(nflog.Packet{In: c.in, Out: c.out, Frame: c.frame, Len: len(c.frame)}, c.rule)
		if err != nil {
			t.Errorf("%s: %v", c.at, err)
		}
		if got != c.line {
			t.Errorf("%s:\n got %q\nwant %q", c.at, got, c.line)
		}
	}
}

// TestCapture checks what a frame cut short by the capture gives: an error
// for headers the kernel would have read, none for those beyond the
// datagram.
func TestCapture(t *testing.T) {
	var c kernelCase
	for _, k := range readKernelCases(t) {
		if strings.Contains(k.line, "OPT (020405B4") && strings.Contains(k.line, "SRC=192.") {
			c = k
			break
		}
	}
	if c.frame == nil {
		t.Fatal("no TCP SYN with options among the kernel's lines")
	}
	// The options are cut: the line stops there, with an error.
	cut := c.frame[:len(c.frame)-4]
	got, err := nflog.Line(nflog.Packet{In: c.in, Out: c.out, Frame: cut, Len: len(c.frame)}, c.rule)
	if !errors.Is(err, nflog.ErrShortCapture) {
		t.Errorf("cut options: error %v, want ErrShortCapture", err)
	}
	if want, _, _ := strings.Cut(c.line, "OPT ("); !strings.HasPrefix(got, want) {
		t.Errorf("cut options: got %q, want it to start with %q", got, want)
	}
	// Link-layer padding past the datagram is not part of it.
	padded := append(append([]byte{}, c.frame...), make([]byte, 20)...)
	got, err = nflog.Line(nflog.Packet{In: c.in, Out: c.out, Frame: padded, Len: len(padded)}, c.rule)
	if err != nil || got != c.line {
		t.Errorf("padded frame: %q, %v; want %q", got, err, c.line)
	}
}

// TestOutput checks the output path's line: no MAC header, OUT named,
// and the mark.
func TestOutput(t *testing.T) {
	for _, c := range readKernelCases(t) {
		if !strings.Contains(c.line, "MAC=") {
			continue
		}
		got, err := nflog.Line(nflog.Packet{Out: "eth0", Frame: c.frame, Len: len(c.frame), Mark: 0x2a}, c.rule)
		if err != nil {
			t.Fatal(err)
		}
		i := strings.Index(c.line, "IN=")
		j := strings.Index(c.line, "SRC=")
		want := c.line[:i] + "IN= OUT=eth0 " + c.line[j:]
		want += "MARK=0x2a " // after the outer packet's fields
		if got != want {
			t.Errorf("%s:\n got %q\nwant %q", c.at, got, want)
		}
		return
	}
	t.Fatal("no line with a MAC header")
}

// TestLongLine checks that a line is cut where nf_log_buf_add cuts it.
func TestLongLine(t *testing.T) {
	c := readKernelCases(t)[0]
	c.rule.Prefix = strings.Repeat("p", 2000)
	got, _ := nflog.Line(nflog.Packet{In: c.in, Frame: c.frame, Len: len(c.frame)}, c.rule)
	if len(got) != 1016 {
		t.Errorf("line of %d bytes, want 1016 (S_SIZE - 1, less the level)", len(got))
	}
}

// TestVLAN checks that a tagged frame's line is flagged: netfilter sees
// it on the VLAN device, with its MAC header rebuilt without the tag.
func TestVLAN(t *testing.T) {
	c := readKernelCases(t)[0]
	tagged := append(append(append([]byte{}, c.frame[:12]...), 0x81, 0x00, 0x00, 0x64), c.frame[12:]...)
	got, err := nflog.Line(nflog.Packet{In: c.in, Out: c.out, Frame: tagged, Len: len(tagged)}, c.rule)
	if !errors.Is(err, nflog.ErrVLAN) {
		t.Errorf("tagged frame: error %v, want ErrVLAN", err)
	}
	if got != c.line {
		t.Errorf("tagged frame:\n got %q\nwant %q", got, c.line)
	}
}

// FuzzLine checks that any frame formats without a panic, and that a
// frame whose headers all fit formats the same when captured whole or
// with bytes beyond the datagram.
func FuzzLine(f *testing.F) {
	f.Add([]byte{}, uint8(0))
	if files, _ := filepath.Glob("testdata/kernel_*.txt"); len(files) > 0 {
		for _, c := range readKernelCases(&testing.T{}) {
			f.Add(c.frame, c.rule.Flags)
		}
	}
	f.Fuzz(func(t *testing.T, frame []byte, flags uint8) {
		r := nflog.Rule{Prefix: "p ", Level: 4, Flags: flags &^ nflog.UID}
		line, err := nflog.Line(nflog.Packet{In: "eth0", Frame: frame, Len: len(frame)}, r)
		if errors.Is(err, nflog.ErrShortCapture) {
			t.Fatalf("whole frame reported short: %q", line)
		}
		if err == nil && fits(frame) {
			padded := append(append([]byte{}, frame...), 0, 0, 0, 0)
			again, err2 := nflog.Line(nflog.Packet{In: "eth0", Frame: padded, Len: len(padded)}, r)
			_ = err2
			if len(line) < 1016 && again != line && !strings.Contains(line, "TRUNCATED") && !strings.Contains(line, "INCOMPLETE") {
				t.Fatalf("padding changed the line:\n%q\n%q", line, again)
			}
		}
	})
}

// fits reports whether an untagged frame's IP datagram is as long as its
// header says, or shorter than the frame: what the IP layer lets through.
func fits(f []byte) bool {
	if len(f) < 14+40 {
		return false
	}
	et := int(f[12])<<8 | int(f[13])
	switch {
	case et == 0x0800:
		n := int(f[16])<<8 | int(f[17])
		return n >= 20 && n >= int(f[14]&0x0f)*4 && 14+n <= len(f)
	case et == 0x86dd:
		n := int(f[18])<<8 | int(f[19])
		return n > 0 && 14+40+n <= len(f)
	}
	return false
}
