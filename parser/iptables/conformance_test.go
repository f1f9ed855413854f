package iptables_test

import (
	"bpfwall/internal/testenv"
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// iptablesTestDir holds iptables 1.8.11's extensions/*.t unit tests; see
// its README for the format.
const iptablesTestDir = "../../../shared/corpora/iptables-t"

// conformanceFiles are the .t files of the extensions bpfwall interprets
// and of the standard options.
var conformanceFiles = []string{
	"iptables",
	"libxt_standard", "libipt_standard", "libip6t_standard",
	"libxt_tcp", "libxt_udp", "libxt_multiport",
	"libxt_iprange", "libipt_iprange", "libip6t_iprange",
	"libipt_icmp", "libip6t_icmp6", "libxt_comment",
	"libxt_conntrack", "libipt_conntrack", "libip6t_conntrack", "libxt_state",
	"libxt_set", "libxt_length", "libipt_ttl", "libip6t_hl", "libxt_mac", "libxt_dscp", "libxt_owner",
	"libxt_mark", "libxt_limit", "libxt_pkttype", "libxt_addrtype",
	"libipt_REJECT", "libip6t_REJECT", "libipt_LOG", "libip6t_LOG",
	"libxt_recent", "libipt_recent", "libip6t_recent",
}

// tCase is one test line of a .t file run in one chain and family.
type tCase struct {
	file   string
	line   int
	table  string
	chain  string
	family rules.Family
	rule   string
	want   string // the rule as iptables-save prints it; "" for FAIL
	result string // OK, FAIL or NOMATCH
}

func (c tCase) String() string {
	return fmt.Sprintf("%s.t:%d [%s %s %s] %s", c.file, c.line, c.family, c.table, c.chain, c.rule)
}

// readTFile expands a .t file into cases: every test line once per chain
// of the preceding ":CHAINS" line and per family the file is for. Lines
// running external commands (@, %) are counted as skipped.
func readTFile(t *testing.T, name string) (cases []tCase, skipped int) {
	t.Helper()
	f, err := os.Open(filepath.Join(iptablesTestDir, name+".t"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	families := []rules.Family{rules.IPv4, rules.IPv6}
	switch {
	case strings.HasPrefix(name, "libipt_"):
		families = []rules.Family{rules.IPv4}
	case strings.HasPrefix(name, "libip6t_"):
		families = []rules.Family{rules.IPv6}
	}
	table, chains := "filter", []string{"INPUT"}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), " \t\r")
		switch {
		case line == "" || line[0] == '#':
			continue
		case line[0] == ':':
			chains = strings.Split(line[1:], ",")
			continue
		case line[0] == '*':
			table = line[1:]
			continue
		case line[0] == '@' || line[0] == '%':
			skipped++
			continue
		}
		fields := strings.Split(line, ";")
		if len(fields) < 3 {
			t.Errorf("%s.t:%d: malformed test line %q", name, n, line)
			continue
		}
		rule, save, result := fields[0], fields[1], fields[2]
		if len(fields) > 3 {
			// The result is for the variant named; the legacy backend,
			// which bpfwall follows, gets the alternative or the inverse.
			if variant := fields[3]; variant == "NFT" {
				switch {
				case len(fields) > 4:
					result = fields[4]
				case result == "OK":
					result = "FAIL"
				default:
					result = "OK"
				}
			}
		}
		want := save
		if save == "=" {
			want = rule
		}
		for _, fam := range families {
			for _, chain := range chains {
				cases = append(cases, tCase{file: name, line: n, table: table, chain: chain, family: fam,
					rule: rule, want: want, result: result})
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cases, skipped
}

// runTCase parses the rule in a one-rule restore input and returns the
// rule line as saved, or the parse error.
func runTCase(c tCase) (string, error) {
	var src strings.Builder
	fmt.Fprintf(&src, "*%s\n", c.table)
	if !slices.Contains(rules.BuiltinChains[c.table], c.chain) {
		fmt.Fprintf(&src, ":%s - [0:0]\n", c.chain)
	}
	fmt.Fprintf(&src, "-A %s %s\nCOMMIT\n", c.chain, c.rule)
	rs, err := iptables.Parse(c.file+".t", []byte(src.String()), iptables.Options{Family: c.family, ForceFamily: true})
	if err != nil {
		return "", err
	}
	prefix := "-A " + c.chain + " "
	for _, l := range strings.Split(string(rs.Save(rules.SaveOptions{})), "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimPrefix(l, prefix), nil
		}
	}
	return "", fmt.Errorf("no rule in saved output:\n%s", rs.Save(rules.SaveOptions{}))
}

// checkTCase returns a description of how the outcome differs from the
// expectation, or "".
func checkTCase(c tCase) string {
	got, err := runTCase(c)
	switch c.result {
	case "OK":
		if err != nil {
			return fmt.Sprintf("unexpected error: %v", err)
		}
		if got != c.want {
			return fmt.Sprintf("saved as\n\t%s\nwant\n\t%s", got, c.want)
		}
	case "FAIL":
		if err == nil {
			return fmt.Sprintf("accepted (saved as %q), want an error", got)
		}
	case "NOMATCH":
		if err != nil {
			return fmt.Sprintf("unexpected error: %v", err)
		}
		if got == c.want {
			return fmt.Sprintf("saved as %q, want a different text", got)
		}
	default:
		return fmt.Sprintf("unknown result %q", c.result)
	}
	return ""
}

// TestConformance runs iptables' own extension tests: rules that must
// load must print back as iptables-save prints them, rules iptables
// rejects must be rejected.
func TestConformance(t *testing.T) {
	testenv.Corpus(t, "iptables-t")
	type tally struct{ pass, total, skipped int }
	results := map[string]*tally{}
	var failures []string
	for _, file := range conformanceFiles {
		cases, skipped := readTFile(t, file)
		tl := &tally{skipped: skipped}
		results[file] = tl
		for _, c := range cases {
			tl.total++
			if msg := checkTCase(c); msg != "" {
				failures = append(failures, fmt.Sprintf("%s: %s", c, msg))
				continue
			}
			tl.pass++
		}
	}
	var all tally
	t.Logf("%-20s %7s %6s %7s", "file", "passed", "total", "skipped")
	for _, file := range conformanceFiles {
		tl := results[file]
		all.pass, all.total, all.skipped = all.pass+tl.pass, all.total+tl.total, all.skipped+tl.skipped
		t.Logf("%-20s %7d %6d %7d", file, tl.pass, tl.total, tl.skipped)
	}
	t.Logf("%-20s %7d %6d %7d", "all", all.pass, all.total, all.skipped)
	for _, f := range failures {
		t.Error(f)
	}
}
