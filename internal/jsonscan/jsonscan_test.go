package jsonscan

import "testing"

func TestSkipValue(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{`"a\"b"x`, 6},
		{`"a\\"x`, 5},
		{`"a\\\"b"x`, 8},
		{`{"a":"}"}x`, 9},
		{`[1,[2,"]"],{}]x`, 14},
		{`123,`, 3},
		{`null}`, 4},
		{`"abc`, -1},
		{`{"a":1`, -1},
		{``, -1},
		{`,`, -1},
	}
	for _, tt := range tests {
		if got := SkipValue([]byte(tt.in), 0); got != tt.want {
			t.Errorf("SkipValue(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestParseInt(t *testing.T) {
	tests := map[string]int64{
		"0": 0, "42": 42, "-7": -7, "9223372036854775807": 1<<63 - 1, "-9223372036854775808": -1 << 63,
		"9223372036854775808": 0, "99999999999999999999": 0, "1.0": 0, "1e3": 0, "": 0, "-": 0, "null": 0, `"3"`: 0,
	}
	for in, want := range tests {
		if got := ParseInt([]byte(in)); got != want {
			t.Errorf("ParseInt(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestMember(t *testing.T) {
	for _, tc := range []struct {
		in, name, want string
		ok             bool
	}{
		{`{"id":"x","model":"up/name","choices":[]}`, "model", `"up/name"`, true},
		{` { "model" : "a" } `, "model", `"a"`, true},
		{`{"choices":[{"model":"nested"}],"model":"top"}`, "model", `"top"`, true},
		{`{"content":"\"model\":\"x\""}`, "model", "", false},
		{`{"model":1,"model":"b"}`, "model", `1`, true},
		{`{"model":`, "model", "", false},
		{`[1]`, "model", "", false},
		{``, "model", "", false},
	} {
		s, e, ok := Member([]byte(tc.in), tc.name)
		if ok != tc.ok || (ok && tc.in[s:e] != tc.want) {
			t.Errorf("Member(%q, %q) = %d, %d, %v; want %q, %v", tc.in, tc.name, s, e, ok, tc.want, tc.ok)
		}
	}
}
