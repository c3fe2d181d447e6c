package idemhttp_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

func mount(tb testing.TB, e *idem.Engine, h http.Handler) string {
	scope := idemhttp.WithScope(func(r *http.Request) string { return r.Header.Get(idemtest.ScopeHeader) })
	srv := httptest.NewUnstartedServer(idemhttp.Middleware(e, scope)(h))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the suite's panics are expected
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv.URL
}

func TestConformance(t *testing.T) {
	idemtest.TestMiddleware(t, mount)
}

func TestKeyFunc(t *testing.T) {
	idemtest.TestKeyFunc(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		key := idemhttp.WithKey(func(r *http.Request) (string, bool) {
			id := r.Header.Get(idemtest.WebhookIDHeader)
			return id, id != ""
		})
		srv := httptest.NewServer(idemhttp.Middleware(e, key)(h))
		tb.Cleanup(srv.Close)
		return srv.URL
	})
}

func TestResponseWriter(t *testing.T) {
	idemtest.TestResponseWriter(t, mount)
}

func TestHTTP2StreamReset(t *testing.T) {
	idemtest.TestHTTP2StreamReset(t, func(e *idem.Engine, h http.Handler) http.Handler {
		return idemhttp.Middleware(e)(h)
	})
}

func TestTimeoutHandlerInside(t *testing.T) {
	// Behind a router, where the middleware cannot see it when it is built,
	// whatever message the timeout answers with.
	for _, msg := range []string{"", "timeout", `{"error":"timeout"}`} {
		t.Run(fmt.Sprintf("message %q", msg), func(t *testing.T) {
			idemtest.TestTimeoutInside(t, func(e *idem.Engine, h http.Handler) http.Handler {
				mux := http.NewServeMux()
				mux.Handle("POST /charges", http.TimeoutHandler(h, 50*time.Millisecond, msg))
				return idemhttp.Middleware(e)(mux)
			})
		})
	}
}

// TestTimeoutHandlerWrappedRefused checks that a TimeoutHandler given to
// the middleware directly is refused when the middleware is built: no
// setting makes that layout safe (see TestTimeoutHandlerInside for what is
// done when it cannot be seen).
func TestTimeoutHandlerWrappedRefused(t *testing.T) {
	e := idem.New(idem.Config{Store: memstore.New()})
	defer func() {
		p := recover()
		msg, _ := p.(string)
		if !strings.Contains(msg, "http.TimeoutHandler") || !strings.Contains(msg, "HandlerTimeout") {
			t.Fatalf("panic %v, want one naming http.TimeoutHandler and Config.HandlerTimeout", p)
		}
	}()
	idemhttp.Middleware(e)(http.TimeoutHandler(http.NotFoundHandler(), time.Second, "timeout"))
}

func TestUnmatchedRoutes(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
	srv := httptest.NewServer(idemhttp.Middleware(idem.New(idem.Config{Store: memstore.New()}))(mux))
	t.Cleanup(srv.Close)
	idemtest.TestUnmatchedRoutes(t, srv.URL)
}

func TestSkip(t *testing.T) {
	idemtest.TestSkip(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		skip := idemhttp.WithSkip(func(r *http.Request) bool { return r.Header.Get(idemtest.SkipHeader) == "1" })
		srv := httptest.NewServer(idemhttp.Middleware(e, skip)(h))
		tb.Cleanup(srv.Close)
		return srv.URL
	})
}
