package idemhttp_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
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

func TestHTTP2StreamReset(t *testing.T) {
	idemtest.TestHTTP2StreamReset(t, func(e *idem.Engine, h http.Handler) http.Handler {
		return idemhttp.Middleware(e)(h)
	})
}

func TestTimeoutHandlerInside(t *testing.T) {
	idemtest.TestTimeoutInside(t, func(e *idem.Engine, h http.Handler) http.Handler {
		return idemhttp.Middleware(e)(http.TimeoutHandler(h, 50*time.Millisecond, ""))
	})
}

func TestUnmatchedRoutes(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
	srv := httptest.NewServer(idemhttp.Middleware(idem.New(idem.Config{Store: memstore.New()}))(mux))
	t.Cleanup(srv.Close)
	idemtest.TestUnmatchedRoutes(t, srv.URL)
}
