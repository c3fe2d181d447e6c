package idemclient_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/core/idemclient"
)

// okRT answers 201 at once: the benchmark measures the Transport alone.
type okRT struct{}

func (okRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// BenchmarkRoundTrip is the cost the Transport adds to a request answered
// at the first attempt: a key, a clone of the request, the Result.
func BenchmarkRoundTrip(b *testing.B) {
	tr := idemclient.New(idemclient.Config{Base: okRT{}})
	req, err := http.NewRequest(http.MethodPost, "http://api.test/v1/charges", strings.NewReader(`{"amount":1}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}
