package loader

import (
	"os/exec"
	"strings"
	"testing"

	"bpfwall/internal/testenv"
	"bpfwall/parser/iptables"
	"bpfwall/rules"
)

// TestSaveKernelSets: the sets read over netlink are the sets `ipset
// save` prints, entry options, nomatch and create options included; a
// set bpfwall does not compile keeps its create line only.
func TestSaveKernelSets(t *testing.T) {
	testenv.RequireTool(t, "ipset")
	inFreshNetns(t)
	if out, err := SaveKernelSets(); err != nil || len(out) != 0 {
		t.Fatalf("no sets: %q, %v", out, err)
	}
	sets := `create allow hash:net family inet hashsize 1024 maxelem 65536 counters
add allow 10.0.0.0/8 packets 3 bytes 180
add allow 10.1.0.0/16 nomatch
add allow 192.0.2.7
create six hash:ip family inet6 hashsize 64 maxelem 128 netmask 64
add six 2001:db8::
create soon hash:ip family inet hashsize 1024 maxelem 65536 timeout 600
add soon 10.9.9.9 timeout 300
create ports hash:ip,port family inet hashsize 1024 maxelem 65536
add ports 10.0.0.1,tcp:80
`
	cmd := exec.Command("ipset", "restore")
	cmd.Stdin = strings.NewReader(sets)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipset restore: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ipset", "destroy").Run() })
	saved, err := exec.Command("ipset", "save").Output()
	if err != nil {
		t.Fatal(err)
	}
	got, err := SaveKernelSets()
	if err != nil {
		t.Fatal(err)
	}
	fromNetlink, err := iptables.ParseIPSets("netlink", got)
	if err != nil {
		t.Fatalf("%v\n%s", err, got)
	}
	fromIPSet, err := iptables.ParseIPSets("ipset save", saved)
	if err != nil {
		t.Fatal(err)
	}
	// ipset prints the timeout left, which ticks; and bpfwall reads no
	// entries of types it does not compile.
	fromIPSet["ports"].Entries = nil
	for _, s := range []map[string]*rules.IPSet{fromNetlink, fromIPSet} {
		for i := range s["soon"].Entries {
			s["soon"].Entries[i].Options = nil
		}
	}
	if a, b := string(rules.SaveSets(fromNetlink)), string(rules.SaveSets(fromIPSet)); a != b {
		t.Errorf("over netlink:\n%s\nipset save:\n%s", a, b)
	}
	if e := fromNetlink["soon"]; e == nil || !strings.Contains(string(got), "add soon 10.9.9.9 timeout ") {
		t.Errorf("the entry's timeout is lost:\n%s", got)
	}
}
