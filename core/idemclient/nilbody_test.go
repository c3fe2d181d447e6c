package idemclient_test

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/idemclient"
)

// nilBodyRT answers its steps with a nil Body, as some fakes and wrappers
// do; a nil step answers nothing at all, not even an error.
type nilBodyRT struct {
	mu    sync.Mutex
	steps []int
	n     int
}

func (b *nilBodyRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	status := b.steps[min(b.n, len(b.steps)-1)]
	b.n++
	if status == 0 {
		return nil, nil
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Request: r}, nil
}

func TestBaseWithoutBody(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		t.Run("attempt timeout "+timeout.String(), func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panic: %v", p)
				}
			}()
			base := &nilBodyRT{steps: []int{503, 201}}
			cfg := testConfig(base, newFakeClock())
			cfg.AttemptTimeout = timeout
			resp, err := idemclient.New(cfg).RoundTrip(newRequest(t, http.MethodPost, "{}"))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || len(b) != 0 || resp.StatusCode != 201 {
				t.Errorf("status %d, body %q (%v); want 201 with an empty body", resp.StatusCode, b, err)
			}
			if err := resp.Body.Close(); err != nil {
				t.Errorf("closing the body: %v", err)
			}
		})
	}
	t.Run("neither response nor error", func(t *testing.T) {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("panic: %v", p)
			}
		}()
		base := &nilBodyRT{steps: []int{0, 201}}
		_, err := idemclient.New(testConfig(base, newFakeClock())).RoundTrip(newRequest(t, http.MethodPost, "{}"))
		var e *idemclient.Error
		if !errors.As(err, &e) || e.Attempts != 1 {
			t.Errorf("error %v, want an *idemclient.Error after 1 attempt", err)
		}
	})
}
