package nft

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"bpfwall/internal/testenv"
	"bpfwall/ir"
	"bpfwall/rules"
)

// kernelRuleset is loaded with nft -f and read back over netlink.
const kernelRuleset = `table inet filter {
	chain input {
		type filter hook input priority 0; policy drop;
		iifname "lo" accept
		ip saddr 10.0.0.0/8 tcp dport 22 accept
		ip6 saddr 2001:db8::/32 udp dport { 53, 123 } accept
		tcp dport 8000-8080 counter accept
		ip protocol icmp accept
		tcp flags & (syn|ack) == syn drop
		meta l4proto udp jump udpin
	}
	chain udpin {
		udp sport 53 return
		ip daddr 192.0.2.1 drop
	}
}
`

// inFreshNetns runs f on a thread of its own in a new network namespace,
// which dies with the thread.
func inFreshNetns(t *testing.T, f func()) {
	t.Helper()
	testenv.RequireRoot(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare netns: %v", err)
			return
		}
		f()
	}()
	<-done
}

func TestReadKernel(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "nft")
	for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
		t.Run(fam.String(), func(t *testing.T) { testReadKernel(t, fam) })
	}
}

func testReadKernel(t *testing.T, fam rules.Family) {
	var got *rules.Ruleset
	var err error
	inFreshNetns(t, func() {
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(kernelRuleset)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("nft -f: %v\n%s", err, out)
			return
		}
		got, err = ReadKernel(Options{Family: fam})
	})
	if t.Failed() {
		return
	}
	if err != nil {
		t.Fatalf("ReadKernel: %v", err)
	}
	// The kernel's text lays the rules out on the lines the source has.
	want, err := Parse("kernel", []byte(kernelRuleset), Options{Family: fam})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	gp, err := ir.Lower(got, ir.LowerOptions{Table: "filter", Chain: "INPUT"})
	if err != nil {
		t.Fatalf("lower the kernel's: %v", err)
	}
	wp, err := ir.Lower(want, ir.LowerOptions{Table: "filter", Chain: "INPUT"})
	if err != nil {
		t.Fatalf("lower the text's: %v", err)
	}
	if g, w := gp.String(), wp.String(); g != w {
		t.Errorf("the kernel's rule set lowers to\n%s\nthe text's to\n%s", g, w)
	}
}
