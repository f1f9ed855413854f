package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"

	"bpfwall/codegen"
	"bpfwall/codegen/abi"
	"bpfwall/internal/packets"
	"bpfwall/loader"
	"bpfwall/rules"
)

// traceLine is one line of trace output.
type traceLine struct {
	// Packet is the packet's number in the input, from 1; Summary says
	// what it is, as tcpdump would.
	Packet  int    `json:"packet"`
	Summary string `json:"summary"`
	Verdict string `json:"verdict,omitempty"`
	// Rule is "file:line" of the deciding rule, "policy", or absent when
	// the packet never reached the rules (Skipped says why).
	Rule    string `json:"rule,omitempty"`
	Chain   string `json:"chain,omitempty"`
	Hotdrop bool   `json:"hotdrop,omitempty"`
	Skipped string `json:"skipped,omitempty"`
	// Logged are the LOG rules that logged the packet ("file:line"), in
	// order.
	Logged []string `json:"logged,omitempty"`
	// Stage says that the netfilter stage decided the packet: its
	// conntrack state only conntrack knows.
	Stage string `json:"stage,omitempty"`
}

func runTrace(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trace", stdout, stderr)
	cf := compileFlags{trace: true}
	cf.register(fs)
	jsonl := fs.String("packets", "", "packets to run, one JSON description per line (`FILE`)")
	pcap := fs.String("pcap", "", "packets to run from a pcap `FILE`")
	iface := fs.StringP("interface", "i", "eth0", "interface the --pcap packets arrive on")
	plain := fs.Bool("no-conntrack", false, "run each packet alone (BPF_PROG_TEST_RUN): conntrack does not see the packets, and lookups find what this namespace's table holds now")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if files, err = cf.inputs(files); err != nil {
		return err
	}
	if len(files) != 1 || (*jsonl == "") == (*pcap == "") {
		fmt.Fprintln(stderr, "usage: bpfwall trace [--hook H] [--chain C] [-O0|-O1] (--packets F.jsonl | --pcap F.pcap) (FILE | --from-kernel)")
		return errUsage
	}
	if cf.hook == codegen.HookSkLookup.String() {
		if *jsonl == "" {
			fmt.Fprintln(stderr, "bpfwall trace: --hook sk-lookup runs lookups described by --packets")
			return errUsage
		}
		descs, err := readPackets(*jsonl)
		if err != nil {
			return err
		}
		prog, err := cf.compile(files[0], stderr)
		if err != nil {
			return printErr(err, stderr)
		}
		return traceLookups(prog, descs, stdout)
	}
	type input struct {
		frame []byte
		iface string
		// skip says why the hook never sees the packet.
		skip string
	}
	var inputs []input
	if *jsonl != "" {
		descs, err := readPackets(*jsonl)
		if err != nil {
			return err
		}
		for i, d := range descs {
			frame, err := d.Frame()
			if err != nil {
				return fmt.Errorf("%s: packet %d: %w", *jsonl, i+1, err)
			}
			iface := d.Iface
			if iface == "" {
				iface = packets.Default.Iface
			}
			inputs = append(inputs, input{frame: frame, iface: iface})
		}
	} else {
		f, err := os.Open(*pcap)
		if err != nil {
			return err
		}
		captured, err := packets.ReadPcap(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", *pcap, err)
		}
		// A cooked capture (tcpdump -i any) holds both directions; each
		// hook sees one.
		egress := cf.hook == codegen.HookTCEgress.String()
		for _, c := range captured {
			in := input{frame: c.Frame, iface: *iface}
			switch {
			case c.Cooked && c.Outgoing && !egress:
				in.skip = "captured leaving the host: the " + cf.hook + " hook sees arriving packets"
			case c.Cooked && !c.Outgoing && egress:
				in.skip = "captured arriving: the tc-egress hook sees leaving packets"
			}
			inputs = append(inputs, in)
		}
	}
	prog, err := cf.compile(files[0], stderr)
	if err != nil {
		return printErr(err, stderr)
	}
	l, err := loader.Load(prog, loader.Options{})
	if err != nil {
		return err
	}
	defer l.Close()
	// A rule set that tests the conntrack state is traced where conntrack
	// sees the packets, one after the other, as on the host: a reply of a
	// flow is ESTABLISHED there.
	run := l.Run
	replayed := false
	if prog.IR.TestsConntrack() && !*plain && (prog.Hook == codegen.HookXDP || prog.Hook == codegen.HookTCIngress) {
		runtime.LockOSThread()
		r, err := l.Replay(*iface)
		if err != nil {
			return privileged(fmt.Errorf("%w (--no-conntrack runs each packet alone, without conntrack)", err))
		}
		defer func() {
			if r.Close() == nil {
				runtime.UnlockOSThread()
			}
		}()
		run, replayed = r.Run, true
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for i, in := range inputs {
		if in.skip != "" {
			if err := enc.Encode(traceLine{Packet: i + 1, Summary: packets.Summary(in.frame), Skipped: in.skip}); err != nil {
				return err
			}
			continue
		}
		out, err := run(in.frame, in.iface)
		if err != nil {
			return err
		}
		line := describe(prog, out, replayed)
		line.Packet, line.Summary = i+1, packets.Summary(in.frame)
		logged, err := l.Logged()
		if err != nil {
			return err
		}
		for _, ev := range logged {
			r := prog.IR.Rules[ev.Rule]
			line.Logged = append(line.Logged, rules.Pos{File: r.Pos.File, Line: r.Pos.Line}.String())
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	return nil
}

// describe turns a test run's outcome into a trace line.
func describe(p *codegen.Program, out loader.Outcome, replayed bool) traceLine {
	line := traceLine{Verdict: out.Verdict.String()}
	switch {
	case out.Stage && replayed:
		line.Stage = "netfilter: decided after conntrack"
	case out.Stage:
		line.Stage = "netfilter: decided after conntrack, which a test run does not have (state INVALID)"
	}
	switch out.Decision.Kind {
	case abi.DecidedByRule, abi.Hotdrop:
		r := p.IR.Rules[out.Decision.Rule]
		line.Rule = rules.Pos{File: r.Pos.File, Line: r.Pos.Line}.String()
		line.Chain = p.IR.Chains[r.Chain].Name
		line.Hotdrop = out.Decision.Kind == abi.Hotdrop
	case abi.DecidedByPolicy:
		line.Rule, line.Chain = "policy", p.IR.Chains[0].Name
	case abi.SkippedInvalid:
		line.Skipped = "dropped by the IP layer before netfilter"
	case abi.SkippedNotIP:
		line.Skipped = "not a packet of the rule set's family"
	case abi.LaterFragment:
		line.Skipped = "a later fragment: netfilter sees the reassembled datagram, which the first fragment decides"
	case abi.TinyFragment:
		line.Skipped = "a first fragment without the whole transport header: dropped"
	case abi.TTLExpired:
		line.Skipped = "TTL 1 or less: the kernel drops it before FORWARD, with a time exceeded error"
	}
	return line
}

// readPackets reads the packet descriptions of a JSON Lines file.
func readPackets(path string) ([]packets.Desc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	descs, err := packets.ReadJSONL(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return descs, nil
}
