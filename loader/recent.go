package loader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"bpfwall/ir"
)

// recentParametersDir holds xt_recent's module parameters, when the module
// is loaded or built in.
const recentParametersDir = "/sys/module/xt_recent/parameters"

// checkRecentParameters refuses a kernel whose xt_recent remembers another
// number of addresses per table (ip_list_tot) or of packets per address
// (ip_pkt_list_tot) than the defaults bpfwall's recent tables are built
// for. Without the module there is nothing to differ from.
func checkRecentParameters(dir string) error {
	for _, p := range []struct {
		name string
		want int
	}{{"ip_list_tot", ir.RecentListTot}, {"ip_pkt_list_tot", ir.RecentPktListTot}} {
		b, err := os.ReadFile(filepath.Join(dir, p.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read xt_recent's %s: %w", p.name, err)
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("read xt_recent's %s: %q is not a number", p.name, b)
		}
		if v != p.want {
			return fmt.Errorf("xt_recent's %s is %d in this kernel, bpfwall's recent tables are built for %d", p.name, v, p.want)
		}
	}
	return nil
}
