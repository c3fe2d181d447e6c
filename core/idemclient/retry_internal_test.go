package idemclient

import (
	"math"
	"net/http"
	"regexp"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	tests := []struct {
		name  string
		value string
		want  time.Duration
		ok    bool
	}{
		{"seconds", "3", 3 * time.Second, true},
		{"zero seconds", "0", 0, true},
		{"seconds with whitespace", " 120 ", 2 * time.Minute, true},
		{"seconds overflowing", "99999999999999999999999", time.Duration(math.MaxInt64), true},
		{"IMF-fixdate", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"RFC 850 date", "Tuesday, 04-Mar-25 05:07:07 GMT", time.Minute, true},
		{"asctime date", "Tue Mar  4 05:06:17 2025", 10 * time.Second, true},
		{"date in the past", now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"empty", "", 0, false},
		{"negative", "-1", 0, false},
		{"fraction", "1.5", 0, false},
		{"words", "soon", 0, false},
		{"date without zone", "Tue, 04 Mar 2025 05:06:17", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseRetryAfter(tt.value, now)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		name   string
		random float64
		want   []time.Duration // waits after attempts 1, 2, ...
	}{
		{"ceilings double up to the maximum", 1, []time.Duration{
			100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
			time.Second, time.Second}},
		{"jitter scales the ceiling", 0.25, []time.Duration{
			25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
			250 * time.Millisecond, 250 * time.Millisecond}},
		{"zero draw waits nothing", 0, []time.Duration{0, 0, 0}},
		{"out-of-range draw is clamped", 7, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		{"negative draw is clamped", -3, []time.Duration{0, 0}},
		{"NaN draw is clamped", math.NaN(), []time.Duration{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := New(Config{MaxBackoff: time.Second, Random: func() float64 { return tt.random }})
			for i, want := range tt.want {
				if got := tr.backoff(i + 1); got != want {
					t.Errorf("backoff(%d) = %v, want %v", i+1, got, want)
				}
			}
		})
	}
	t.Run("huge attempt numbers stay at the maximum", func(t *testing.T) {
		tr := New(Config{MaxBackoff: 3 * time.Second, Random: func() float64 { return 1 }})
		for _, n := range []int{40, 62, 63, 64, 1000} {
			if got := tr.backoff(n); got != 3*time.Second {
				t.Errorf("backoff(%d) = %v, want 3s", n, got)
			}
		}
	})
}

// TestBackoffDefaults: Backoff, which the gRPC interceptor calls too,
// gives a sensible wait for any arguments.
func TestBackoffDefaults(t *testing.T) {
	one := func() float64 { return 1 }
	for _, tc := range []struct {
		name         string
		attempt      int
		base, limit  time.Duration
		random       func() float64
		want, within time.Duration
	}{
		{name: "zero base is the default", attempt: 1, limit: time.Minute, random: one, want: DefaultBaseBackoff},
		{name: "limit below base is base", attempt: 5, base: time.Second, limit: time.Millisecond, random: one, want: time.Second},
		{name: "attempt below one is the first", attempt: 0, base: time.Second, limit: time.Minute, random: one, want: time.Second},
		{name: "nil random draws below the ceiling", attempt: 2, base: time.Second, limit: time.Minute, within: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Backoff(tc.attempt, tc.base, tc.limit, tc.random)
			if tc.within > 0 {
				if got < 0 || got >= tc.within {
					t.Fatalf("Backoff = %v, want in [0, %v)", got, tc.within)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("Backoff = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRetryableStatus(t *testing.T) {
	tests := []struct {
		code            int
		keyed, notKeyed bool
	}{
		{200, false, false}, {201, false, false}, {304, false, false},
		{400, false, false}, {401, false, false}, {403, false, false}, {404, false, false},
		{408, true, true}, {409, true, false}, {413, false, false}, {422, false, false},
		{425, true, true}, {429, true, true},
		{500, true, true}, {502, true, true}, {503, true, true}, {504, true, true}, {599, true, true},
		{501, false, false}, {505, false, false}, {506, false, false}, {507, true, true}, {508, false, false},
		{510, false, false}, {511, false, false},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.code), func(t *testing.T) {
			if got := retryableStatus(tt.code, true); got != tt.keyed {
				t.Errorf("keyed %d: retryable = %v, want %v", tt.code, got, tt.keyed)
			}
			if got := retryableStatus(tt.code, false); got != tt.notKeyed {
				t.Errorf("not keyed %d: retryable = %v, want %v", tt.code, got, tt.notKeyed)
			}
		})
	}
}

func TestNewKey(t *testing.T) {
	uuid4 := regexp.MustCompile(`^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$`)
	seen := make(map[string]bool)
	for range 1000 {
		k := NewKey()
		if !uuid4.MatchString(k) {
			t.Fatalf("NewKey() = %s, not a quoted UUIDv4", k)
		}
		if seen[k] {
			t.Fatalf("NewKey() repeated %s", k)
		}
		seen[k] = true
	}
}
