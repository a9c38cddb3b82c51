package slurmtest

import "testing"

func TestTransient(t *testing.T) {
	for _, tt := range []struct {
		out  string
		want bool
	}{
		{"sacctmgr: accounting_storage/slurmdbd: acct_storage_p_remove_users: No error\n Nothing deleted\n", true},
		{" Nothing deleted\n", false},
		{" Error with request: Invalid account or account/partition combination specified\n", false},
		{"sacctmgr: error: acct_storage_p_add_users: Access/permission denied\n", false},
		{"", false},
	} {
		if got := transient([]byte(tt.out)); got != tt.want {
			t.Errorf("transient(%q) = %v, want %v", tt.out, got, tt.want)
		}
	}
}
