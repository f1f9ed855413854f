package rules

// RateLimit is nft's limit statement (nft_limit): "limit rate [over]
// Rate [bytes]/unit [burst Burst packets|bytes]", as nft sends it to the
// kernel.
type RateLimit struct {
	Located
	Rate  uint64 // packets, or bytes with Bytes, per Unit
	Unit  uint64 // seconds
	Burst uint32 // packets, or bytes with Bytes
	Bytes bool
	Over  bool
	// BothFamilies is set when the statement's rule, in an inet or
	// netdev table, is reached by IPv4 and IPv6 packets alike: one bucket
	// serves both. TableFamily is the table's family.
	BothFamilies bool
	TableFamily  string
}

func (m *RateLimit) Name() string { return "limit" }

// rateLimitUnits name the units nft prints a rate in, largest first.
var rateLimitUnits = []struct {
	name    string
	seconds uint64
}{{"week", 604800}, {"day", 86400}, {"hour", 3600}, {"minute", 60}, {"second", 1}}

// appendSave prints the statement in nft's words: iptables has no way to
// say it.
func (m *RateLimit) appendSave(b []byte) []byte {
	b = append(b, " --nft-rate "...)
	if m.Over {
		b = append(b, "over "...)
	}
	b = appendUint(b, m.Rate)
	if m.Bytes {
		b = append(b, " bytes"...)
	}
	b = append(b, '/')
	unit := ""
	for _, u := range rateLimitUnits {
		if u.seconds == m.Unit {
			unit = u.name
			break
		}
	}
	if unit == "" {
		b = appendUint(b, m.Unit)
		unit = "seconds"
	}
	b = append(b, unit...)
	b = append(b, " --nft-burst "...)
	b = appendUint(b, uint64(m.Burst))
	if m.Bytes {
		return append(b, " bytes"...)
	}
	return append(b, " packets"...)
}
