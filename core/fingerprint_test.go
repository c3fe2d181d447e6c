package idem_test

import (
	"strings"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// form builds a multipart/form-data request body with the given boundary
// around parts, each given as its header lines and its content.
func form(boundary string, parts ...[2]string) (ctype, body string) {
	var b strings.Builder
	b.WriteString("preamble\r\n")
	for _, p := range parts {
		b.WriteString("--" + boundary + "\r\n" + p[0] + "\r\n\r\n" + p[1] + "\r\n")
	}
	b.WriteString("--" + boundary + "--\r\n")
	return "multipart/form-data; boundary=" + boundary, b.String()
}

func formRequest(boundary string, parts ...[2]string) exchange.Request {
	ctype, body := form(boundary, parts...)
	return exchange.Request{Method: "POST", Path: "/upload", ContentType: ctype, Body: []byte(body)}
}

// nextPart is a form part's header, and imitated what DefaultFingerprint
// hashes for that header: a part ('p') of one field, its name and its one
// value, each after its length.
var (
	nextPart = [2]string{`Content-Disposition: form-data; name="b"`}
	imitated = "p\x01\x13Content-Disposition\x01\x13form-data; name=\"b\""
)

func TestDefaultFingerprint(t *testing.T) {
	jsonReq := func(body string) exchange.Request {
		return exchange.Request{Method: "POST", Path: "/charges", ContentType: "application/json", Body: []byte(body)}
	}
	withEncoding := func(r exchange.Request, enc string) exchange.Request { r.ContentEncoding = enc; return r }
	withType := func(r exchange.Request, ct string) exchange.Request { r.ContentType = ct; return r }
	amount := [2]string{`Content-Disposition: form-data; name="amount"`, "100"}
	receipt := [2]string{"Content-Disposition: form-data; name=\"receipt\"; filename=\"r.txt\"\r\nContent-Type: text/plain", "paid"}

	same := []struct {
		name string
		a, b exchange.Request
	}{
		{"JSON member order", jsonReq(`{"a":1,"b":2}`), jsonReq(`{"b":2,"a":1}`)},
		{"JSON case variants moved together", jsonReq(`{"Amount":1,"z":0,"amount":2}`), jsonReq(`{"z":0,"Amount":1,"amount":2}`)},
		{"form boundary", formRequest("b1", amount, receipt), formRequest("another-boundary", amount, receipt)},
		{"form preamble", formRequest("b1", amount), func() exchange.Request {
			r := formRequest("b1", amount)
			r.Body = []byte(strings.Replace(string(r.Body), "preamble", "something else", 1))
			return r
		}()},
		{"encoding spacing", withEncoding(jsonReq(`{}`), "gzip"), withEncoding(jsonReq(`{}`), " gzip ")},
	}
	for _, tt := range same {
		t.Run("same/"+tt.name, func(t *testing.T) {
			if a, b := idem.DefaultFingerprint(tt.a), idem.DefaultFingerprint(tt.b); a != b {
				t.Errorf("fingerprints differ: %s, %s", a, b)
			}
		})
	}

	different := []struct {
		name string
		a, b exchange.Request
	}{
		{"JSON case variant order", jsonReq(`{"amount":100,"Amount":99999}`), jsonReq(`{"Amount":99999,"amount":100}`)},
		{"JSON Kelvin sign order", jsonReq("{\"k\":1,\"\u212a\":2}"), jsonReq("{\"\u212a\":2,\"k\":1}")},
		{"JSON long s order", jsonReq("{\"s\":1,\"\u017f\":2}"), jsonReq("{\"\u017f\":2,\"s\":1}")},
		{"encoded and plain", jsonReq(`{"a":1}`), withEncoding(jsonReq(`{"a":1}`), "gzip")},
		{"two encodings", withEncoding(jsonReq(`x`), "gzip"), withEncoding(jsonReq(`x`), "br")},
		{"encoded JSON is not canonicalised", withEncoding(jsonReq(`{"a":1,"b":2}`), "gzip"), withEncoding(jsonReq(`{"b":2,"a":1}`), "gzip")},
		{"form content", formRequest("b1", amount), formRequest("b1", [2]string{amount[0], "200"})},
		{"form field name", formRequest("b1", amount), formRequest("b1", [2]string{`Content-Disposition: form-data; name="Amount"`, "100"})},
		{"form file name", formRequest("b1", receipt), formRequest("b1", [2]string{strings.Replace(receipt[0], "r.txt", "s.txt", 1), receipt[1]})},
		{"form part type", formRequest("b1", receipt), formRequest("b1", [2]string{strings.Replace(receipt[0], "text/plain", "text/csv", 1), receipt[1]})},
		{"form part order", formRequest("b1", amount, receipt), formRequest("b1", receipt, amount)},
		// One part whose content ends with what the next part's header and
		// content look like, framed as the fingerprint frames a part (a
		// 'p', the number of header fields, each name and value with its
		// length before it): if a content were not framed by its length,
		// one part and two would hash alike.
		{"form part imitating the next", formRequest("b1", [2]string{`Content-Disposition: form-data; name="a"`, "1"}, [2]string{nextPart[0], "2"}),
			formRequest("b1", [2]string{`Content-Disposition: form-data; name="a"`, "1" + imitated + "2"})},
		{"form and the same bytes as text", formRequest("b1", amount), withType(formRequest("b1", amount), "text/plain")},
		{"invalid JSON and the same bytes as text", withType(jsonReq(`{"a":`), "text/plain"), jsonReq(`{"a":`)},
		{"malformed form and the same bytes as text", withType(jsonReq("not a form"), "multipart/form-data; boundary=x"),
			withType(jsonReq("not a form"), "text/plain")},
		{"malformed forms hashed raw", withType(jsonReq("not a form"), "multipart/form-data; boundary=x"),
			withType(jsonReq("not a form!"), "multipart/form-data; boundary=x")},
	}
	for _, tt := range different {
		t.Run("different/"+tt.name, func(t *testing.T) {
			if a, b := idem.DefaultFingerprint(tt.a), idem.DefaultFingerprint(tt.b); a == b {
				t.Errorf("both fingerprint to %s", a)
			}
		})
	}
}
