package loader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecentParameters: the loader accepts xt_recent's defaults and an
// absent module, and refuses other table sizes.
func TestRecentParameters(t *testing.T) {
	cases := []struct {
		name    string
		files   map[string]string
		wantErr string
	}{
		{"defaults", map[string]string{"ip_list_tot": "100\n", "ip_pkt_list_tot": "0\n", "ip_list_hash_size": "128\n"}, ""},
		{"no module", nil, ""},
		{"more addresses", map[string]string{"ip_list_tot": "200\n", "ip_pkt_list_tot": "0\n"}, "ip_list_tot is 200 in this kernel, bpfwall's recent tables are built for 100"},
		{"fixed stamps", map[string]string{"ip_list_tot": "100\n", "ip_pkt_list_tot": "20\n"}, "ip_pkt_list_tot is 20"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := checkRecentParameters(dir)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
	// This machine's kernel is the one bpfwall is built for.
	if _, err := os.Stat(recentParametersDir); err == nil {
		if err := checkRecentParameters(recentParametersDir); err != nil {
			t.Errorf("this kernel: %v", err)
		}
	}
}
