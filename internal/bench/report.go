package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// Report is everything a bench run measured, as --json writes it.
type Report struct {
	Kernel string    `json:"kernel"`
	CPUs   int       `json:"cpus"`
	Start  time.Time `json:"start"`
	// Repeat, RunTime and Runs are the test runs' settings (Config).
	Repeat  int           `json:"repeat,omitempty"`
	RunTime time.Duration `json:"run_time_ns,omitempty"`
	Runs    int           `json:"runs,omitempty"`
	Micro   []Result      `json:"micro,omitempty"`
	E2E     []E2EResult   `json:"e2e,omitempty"`
}

// NewReport describes the machine.
func NewReport() *Report {
	r := &Report{CPUs: runtime.NumCPU(), Start: time.Now().UTC().Truncate(time.Second)}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		r.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	return r
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadJSON reads a report WriteJSON wrote.
func ReadJSON(rd io.Reader) (*Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("read bench report: %w", err)
	}
	return &r, nil
}

// WriteSVGFile writes the chart of the test runs, or of the end-to-end
// runs when there are only those, to a file.
func (r *Report) WriteSVGFile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	write := func(w io.Writer) error { return WriteSVG(w, r.Micro) }
	if len(r.Micro) == 0 && len(r.E2E) > 0 {
		write = func(w io.Writer) error { return WriteE2ESVG(w, r.E2E) }
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteTable writes the test runs as an aligned table; why rows were
// skipped follows it as numbered notes.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "family\tN\tlevel\tno-match ns\tlast ns\trandom ns\tfloor ns\tno-match/floor\trepeat\tinsns\tverified\tjited B\tmaps\tcompile\tload\tpeak RSS\t")
	var notes notes
	for _, r := range results {
		if r.Skipped != "" {
			// Every row has every cell: tabwriter aligns runs of rows.
			fmt.Fprintf(tw, "%s\t%d\t-O%d\t%s%s\n", r.Family, r.N, r.Level, notes.add(r.Skipped), strings.Repeat("\t-", 12)+"\t")
			continue
		}
		ratio := "-"
		if r.FloorNs > 0 && r.NoMatchNs > 0 {
			ratio = fmt.Sprintf("%.1f×", r.NoMatchNs/r.FloorNs)
		}
		fmt.Fprintf(tw, "%s\t%d\t-O%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t\n",
			r.Family, r.N, r.Level, ns(r.NoMatchNs), ns(r.LastNs), ns(r.RandomNs), ns(r.FloorNs), ratio,
			r.Repeat, r.Insns, r.Verified, r.JITedBytes, bytesize(int64(r.MapBytes)),
			duration(r.Compile), duration(r.Load), bytesize(r.PeakRSS))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return notes.write(w)
}

// notes number the distinct reasons rows were skipped.
type notes []string

// add returns the cell of a skipped row: the number of its note.
func (n *notes) add(reason string) string {
	for i, x := range *n {
		if x == reason {
			return fmt.Sprintf("skipped [%d]", i+1)
		}
	}
	*n = append(*n, reason)
	return fmt.Sprintf("skipped [%d]", len(*n))
}

func (n notes) write(w io.Writer) error {
	if len(n) > 0 {
		fmt.Fprintln(w)
	}
	for i, x := range n {
		if _, err := fmt.Fprintf(w, "[%d] %s\n", i+1, x); err != nil {
			return err
		}
	}
	return nil
}

func ns(v float64) string {
	if v == 0 {
		return "-"
	}
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func duration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func bytesize(b int64) string {
	switch {
	case b <= 0:
		return "-"
	case b < 1<<20:
		return fmt.Sprintf("%dK", (b+1023)>>10)
	}
	return fmt.Sprintf("%.1fM", float64(b)/(1<<20))
}

// WriteE2ETable writes the end-to-end runs as an aligned table, with each
// engine's rate relative to the XDP drop floor's, iptables-legacy's and
// nftables' for the same workload.
func WriteE2ETable(w io.Writer, results []E2EResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "family\tN\tengine\tsent/s\tdropped/s\tforwarded/s\t÷ xdp-drop\t÷ iptables\t÷ nftables\t")
	rate := func(r E2EResult, engine string) float64 {
		for _, x := range results {
			if x.Family == r.Family && x.N == r.N && x.Engine == engine && x.Skipped == "" {
				return x.Handled()
			}
		}
		return 0
	}
	ratio := func(a, b float64) string {
		if a == 0 || b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	var notes notes
	for _, r := range results {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s%s\n", r.Family, r.N, r.Engine, notes.add(r.Skipped), strings.Repeat("\t-", 5)+"\t")
			continue
		}
		h := r.Handled()
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Family, r.N, r.Engine,
			pps(r.SentPPS), pps(r.DroppedPPS), pps(r.ForwardedPPS),
			ratio(h, rate(r, "xdp-drop")), ratio(h, rate(r, "iptables-legacy")), ratio(h, rate(r, "nftables")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return notes.write(w)
}

func pps(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
