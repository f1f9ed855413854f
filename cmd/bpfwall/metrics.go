package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// runMetrics prints the filters' counters and facts in the Prometheus
// text exposition format, or with --listen serves them at /metrics; every
// scrape reads the kernel's counters afresh.
func runMetrics(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("metrics", stdout, stderr)
	listen := fs.String("listen", "", "serve /metrics on `ADDR` (host:port) until interrupted, instead of printing once")
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(files) != 0 {
		return fmt.Errorf("%w: metrics takes no FILE", errUsage)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(&filterCollector{stderr: stderr})
	if *listen == "" {
		return writeMetrics(reg, stdout)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "bpfwall: serving metrics on http://%s/metrics\n", ln.Addr())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}

// writeMetrics prints what reg gathers; a filter that could not be read
// fails the command after the others are printed.
func writeMetrics(reg prometheus.Gatherer, w io.Writer) error {
	mfs, gatherErr := reg.Gather()
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	return gatherErr
}

// The metrics, by the labels that tell the filters apart.
var (
	filterLabels = []string{"netns", "hook", "family"}
	ruleLabels   = append(filterLabels[:len(filterLabels):len(filterLabels)], "table", "chain", "rule", "target")
	policyLabels = append(filterLabels[:len(filterLabels):len(filterLabels)], "table", "chain", "policy")

	descRulePackets = prometheus.NewDesc("bpfwall_rule_packets_total",
		"Packets a compiled rule matched (as iptables-save -c counts them); rule is FILE:LINE where it was written.", ruleLabels, nil)
	descRuleBytes = prometheus.NewDesc("bpfwall_rule_bytes_total",
		"Bytes of the packets a compiled rule matched.", ruleLabels, nil)
	descPolicyPackets = prometheus.NewDesc("bpfwall_policy_packets_total",
		"Packets the entry chain's policy decided.", policyLabels, nil)
	descPolicyBytes = prometheus.NewDesc("bpfwall_policy_bytes_total",
		"Bytes of the packets the entry chain's policy decided.", policyLabels, nil)
	descAccelDropped = prometheus.NewDesc("bpfwall_accelerator_dropped_packets_total",
		"Packets an accelerator dropped at xdp, before the chains (which save -c and the rules' counters count with theirs).", filterLabels, nil)
	descAccelDroppedBytes = prometheus.NewDesc("bpfwall_accelerator_dropped_bytes_total",
		"Bytes of the packets an accelerator dropped at xdp.", filterLabels, nil)
	descProgram = prometheus.NewDesc("bpfwall_program_info",
		"The loaded filter program (value 1).", append(filterLabels[:len(filterLabels):len(filterLabels)], "program_id", "tag", "level", "table", "chain", "file"), nil)
	descRules = prometheus.NewDesc("bpfwall_program_rules",
		"Rules compiled into the filter program.", filterLabels, nil)
	descInsns = prometheus.NewDesc("bpfwall_program_instructions",
		"Size of the filter program in eBPF instructions.", filterLabels, nil)
	descVerified = prometheus.NewDesc("bpfwall_program_verified_instructions",
		"Instructions the kernel's verifier processed when it loaded the program.", filterLabels, nil)
	descLoaded = prometheus.NewDesc("bpfwall_program_loaded_timestamp_seconds",
		"When the filter program was loaded, in seconds since the epoch.", filterLabels, nil)
	descIface = prometheus.NewDesc("bpfwall_interface_attached",
		"1 for an interface the filter runs on, 0 for one that is gone (deleted or moved to another namespace).", append(filterLabels[:len(filterLabels):len(filterLabels)], "interface", "mode"), nil)
	descLogLost = prometheus.NewDesc("bpfwall_log_lost_events_total",
		"LOG events lost to a full ring buffer.", filterLabels, nil)
	descDeferred = prometheus.NewDesc("bpfwall_netfilter_deferred_packets_total",
		"Packets the filter passed to its netfilter stage (their state only conntrack knows).", filterLabels, nil)
	descEvaluated = prometheus.NewDesc("bpfwall_netfilter_evaluated_packets_total",
		"Packets the netfilter stage evaluated after conntrack.", filterLabels, nil)
	descRejectDropped = prometheus.NewDesc("bpfwall_netfilter_reject_dropped_packets_total",
		"REJECT verdicts the netfilter stage dropped without a reply.", filterLabels, nil)
	descConntrack = prometheus.NewDesc("bpfwall_conntrack_held",
		"For a filter that tests the conntrack state: 1 if conntrack is kept on in the namespace.", filterLabels, nil)
	descScrapeError = prometheus.NewDesc("bpfwall_scrape_error",
		"A filter could not be read.", nil, nil)
)

// filterCollector collects the metrics of the filters of the network
// namespace it runs in.
type filterCollector struct{ stderr io.Writer }

func (c *filterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRulePackets, descRuleBytes, descPolicyPackets, descPolicyBytes,
		descAccelDropped, descAccelDroppedBytes, descProgram, descRules, descInsns, descVerified, descLoaded, descIface, descLogLost,
		descDeferred, descEvaluated, descRejectDropped, descConntrack, descScrapeError} {
		ch <- d
	}
}

func (c *filterCollector) Collect(ch chan<- prometheus.Metric) {
	_, places, err := pinnedPlaces(c.stderr)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descScrapeError, err)
		return
	}
	for _, p := range places {
		st, err := statusOf(p, true)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(descScrapeError, fmt.Errorf("%s filter: %w", p.Name(), privileged(err)))
			continue
		}
		collectFilter(ch, st)
	}
}

// collectFilter sends the metrics of the filter st describes.
func collectFilter(ch chan<- prometheus.Metric, st filterStatus) {
	// A namespace has a chain at its netfilter hook per table and chain:
	// the hook label names both (netfilter-filter-INPUT).
	hook := st.Hook
	if st.ChainHook != nil {
		hook = fmt.Sprintf("%s-%s-%s", st.Hook, st.Table, st.Chain)
	}
	fl := []string{strconv.FormatUint(st.NetNS, 10), hook, st.Family}
	with := func(more ...string) []string { return append(fl[:len(fl):len(fl)], more...) }
	counter := func(d *prometheus.Desc, v uint64, labels []string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels []string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, r := range st.RuleCounters {
		labels := with(st.Table, r.Chain, r.Rule, r.Target)
		counter(descRulePackets, r.Packets, labels)
		counter(descRuleBytes, r.Bytes, labels)
	}
	if st.Hook == "accelerator" {
		// Its entry chain's policy passes, uncounted; its copies' policies
		// are among its rules.
		counter(descAccelDropped, st.Counters.DroppedPackets, fl)
		counter(descAccelDroppedBytes, st.Counters.DroppedBytes, fl)
	} else {
		pl := with(st.Table, st.Chain, st.Policy)
		counter(descPolicyPackets, st.Counters.PolicyPackets, pl)
		counter(descPolicyBytes, st.Counters.PolicyBytes, pl)
	}
	gauge(descProgram, 1, with(strconv.FormatUint(uint64(st.Program), 10), st.Tag, st.Level, st.Table, st.Chain, st.File))
	gauge(descRules, float64(st.Rules), fl)
	gauge(descInsns, float64(st.Instructions), fl)
	gauge(descVerified, float64(st.VerifiedInsns), fl)
	gauge(descLoaded, float64(st.LoadedAt.UnixNano())/1e9, fl)
	for _, ifc := range st.Ifaces {
		v := 1.0
		if ifc.Gone {
			v = 0
		}
		gauge(descIface, v, with(ifc.Name, ifc.Mode))
	}
	if st.Log != nil {
		counter(descLogLost, st.Log.Lost, fl)
	}
	if nf := st.Netfilter; nf != nil {
		counter(descDeferred, nf.Counts.Deferred, fl)
		counter(descEvaluated, nf.Counts.Evaluated, fl)
		counter(descRejectDropped, nf.Counts.RejectDropped, fl)
	}
	if st.ConntrackHeld != nil {
		v := 0.0
		if *st.ConntrackHeld {
			v = 1
		}
		gauge(descConntrack, v, fl)
	}
}
