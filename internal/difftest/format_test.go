package difftest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"bpfwall/internal/testenv"
	"bpfwall/parser/nft"
	"bpfwall/rules"
)

// TestFormatListsAsNft: the listing fmt --nft writes (nft.Format) of a
// random rule set, loaded with nft -f, lists as the rule set itself does:
// with counters' values (-c) under "nft list ruleset", without under
// "nft -s list ruleset". The rule sets are iptables-restore-translate's
// output of random iptables rule sets (GenerateRules), and random nft
// rule sets (GenerateNFT), DIFFTEST_SEEDS×5 per family of each (default
// 4).
func TestFormatListsAsNft(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "nft", "unshare", "ip", "iptables-restore-translate", "ip6tables-restore-translate")
	seeds := envInt(t, "DIFFTEST_SEEDS", 4) * 5
	dir := t.TempDir()
	compared := map[string]int{}
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		translate := "iptables-restore-translate"
		if fam == rules.IPv6 {
			translate = "ip6tables-restore-translate"
		}
		for seed := uint64(1); seed <= uint64(seeds); seed++ {
			opts := GenOptions{Family: fam, InIface: "fwin", OutIface: "fwout"}
			ipt := filepath.Join(dir, fmt.Sprintf("%s-%d.rules", fam, seed))
			if err := os.WriteFile(ipt, GenerateRules(seed, opts), 0o600); err != nil {
				t.Fatal(err)
			}
			scripts := map[string][]byte{"nft": GenerateNFT(seed, opts)}
			if out, err := exec.Command(translate, "-f", ipt).Output(); err == nil {
				scripts["txlate"] = out
			}
			for kind, script := range scripts {
				name := fmt.Sprintf("%s %s seed %d", kind, fam, seed)
				if !listsAsNft(t, name, script) {
					t.Logf("%s:\n%s", name, script)
					continue
				}
				compared[kind]++
			}
		}
	}
	t.Logf("listings loaded into nft list as the rule set: %d translated, %d nft", compared["txlate"], compared["nft"])
	for _, kind := range []string{"txlate", "nft"} {
		if compared[kind] < seeds {
			t.Errorf("only %d %s rule sets compared", compared[kind], kind)
		}
	}
}

// listsAsNft loads script and its listing with nft -f, each in a network
// namespace of its own, and compares what nft lists, with and without
// counters. A script nft refuses is no comparison (false, no error).
func listsAsNft(t *testing.T, name string, script []byte) bool {
	want, ok := testenv.NftList(t, script, "nft list ruleset", genIfaces)
	if !ok {
		return false
	}
	wantS, _ := testenv.NftList(t, script, "nft -s list ruleset", genIfaces)
	for _, counters := range []bool{true, false} {
		listing, err := nft.Format(name, script, nft.FormatOptions{Counters: counters})
		if err != nil {
			t.Errorf("%s: Format: %v", name, err)
			return false
		}
		list, w := "nft -s list ruleset", wantS
		if counters {
			list, w = "nft list ruleset", want
		}
		got, ok := testenv.NftList(t, listing, list, genIfaces)
		if !ok || got != w {
			t.Errorf("%s (counters %v): the listing lists\n%s\nthe rule set\n%s\nlisting:\n%s", name, counters, got, w, listing)
			return false
		}
	}
	return true
}

// genIfaces makes the interfaces the generators name: iif and oif take
// only interfaces that exist.
const genIfaces = "ip link add fwin type veth peer name fwout"
