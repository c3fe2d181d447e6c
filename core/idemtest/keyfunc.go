package idemtest

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/memstore"
)

// WebhookIDHeader is the header a KeyedMount must take each request's key
// from, as a webhook receiver takes it from the Standard Webhooks
// webhook-id header.
const WebhookIDHeader = "Webhook-Id"

// KeyedMount is a Mount whose middleware takes the key from the
// WebhookIDHeader header through the adapter's key option (WithKey),
// answering ok false when the header is absent.
type KeyedMount func(tb testing.TB, e *idem.Engine, h http.Handler) (baseURL string)

// TestKeyFunc checks an adapter's key option: the key comes from where the
// option says, by the same rules as the header, and a request without one
// is answered as the policy says.
func TestKeyFunc(t *testing.T, mount KeyedMount) {
	t.Helper()
	for _, optional := range []bool{false, true} {
		name := "KeyRequired"
		if optional {
			name = "KeyOptional"
		}
		t.Run(name, func(t *testing.T) {
			a := newApp()
			t.Cleanup(a.releaseSlow)
			store := memstore.New(memstore.WithPurgeInterval(0))
			t.Cleanup(func() { store.Close() })
			e := idem.New(idem.Config{Store: store, KeyOptional: optional, ProblemBase: ProblemBase,
				Logger: slog.New(slog.DiscardHandler)})
			url := mount(t, e, a)
			send := func(webhookID, idempotencyKey string) *result {
				req, _ := http.NewRequest(http.MethodPost, url+"/charges", strings.NewReader(`{"event":"settled"}`))
				req.Header.Set("Content-Type", "application/json")
				if webhookID != "" {
					req.Header.Set(WebhookIDHeader, webhookID)
				}
				if idempotencyKey != "" {
					req.Header.Set(idem.DefaultHeaderName, idempotencyKey)
				}
				resp, err := suiteClient.Do(req)
				if err != nil {
					return &result{err: err}
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return &result{status: resp.StatusCode, header: resp.Header, body: b, err: err}
			}
			first := send("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "")
			if first.err != nil || first.status != 201 {
				t.Fatalf("first delivery: %d %v %s", first.status, first.err, first.body)
			}
			// The key is the webhook id, whatever Idempotency-Key says.
			wantReplay(t, first, send("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", `"something else"`))
			if got := a.calls.Load(); got != 1 {
				t.Fatalf("handler ran %d times, want once", got)
			}
			wantProblem(t, send("msg with spaces", ""), 400, exchange.ProblemKeyInvalid)
			missing := send("", `"an Idempotency-Key is not the key here"`)
			if optional {
				if missing.status != 201 || missing.replayed() || a.calls.Load() != 2 {
					t.Fatalf("no webhook id, keys optional: %d (replayed %v), want the handler run unguarded", missing.status, missing.replayed())
				}
				return
			}
			wantProblem(t, missing, 400, exchange.ProblemKeyMissing)
		})
	}
}
