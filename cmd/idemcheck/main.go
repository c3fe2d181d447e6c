// Command idemcheck probes a live HTTP endpoint, black-box, for the
// Idempotency-Key behaviour of draft-ietf-httpapi-idempotency-key-header-07:
// key syntax, replays, payload fingerprints, concurrent retries, failures,
// tenant isolation, problem details and safe methods. Each case is labelled
// MUST, SHOULD or MAY with the draft's section, so a report separates
// violations from choices.
//
//	idemcheck -url URL [-X METHOD] [-d BODY] [-H 'Name: value']... [-tenant2 'Name: value']... [-strict] [-json]
//
// BODY may contain {{unique}}, replaced by a fresh value per logical
// request. -H headers go on every request; -tenant2 headers replace
// same-named ones for a second identity. The exit status is 0 when no MUST
// case fails (with -strict: no MUST or SHOULD case), 1 when one does, and 2
// for a usage or connection error. See docs/idemcheck.md.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// headerFlags collects repeated 'Name: value' flags.
type headerFlags []string

func (h *headerFlags) String() string { return strings.Join(*h, ", ") }

func (h *headerFlags) Set(s string) error {
	if _, _, err := parseHeader(s); err != nil {
		return err
	}
	*h = append(*h, s)
	return nil
}

func parseHeader(s string) (name, value string, err error) {
	name, value, ok := strings.Cut(s, ":")
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if !ok || !validToken(name) || !validValue(value) {
		return "", "", fmt.Errorf("%q is not a header ('Name: value')", s)
	}
	return http.CanonicalHeaderKey(name), value, nil
}

// validToken reports whether s is an RFC 9110 token (a header name or a
// method).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validValue reports whether s can be sent as a field value.
func validValue(s string) bool {
	for _, c := range []byte(s) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// header turns the flags into a header, nil if there are none.
func (h headerFlags) header() http.Header {
	if len(h) == 0 {
		return nil
	}
	out := http.Header{}
	for _, s := range h {
		name, value, _ := parseHeader(s)
		out.Add(name, value)
	}
	return out
}

// options are the command line's.
type options struct {
	url, method, body      string
	headers, tenant2       headerFlags
	strict, json, quiet    bool
	dryRun                 bool
	junit, openapi         string
	slowHeader, failHeader headerFlags
	slowBody, keyHeader    string
	timeout, slowTimeout   time.Duration
	methodSet              bool // -X was given
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("idemcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: idemcheck -url URL [-X METHOD] [-d BODY] [-H 'Name: value']... [-tenant2 'Name: value']... [-strict] [-json]

Probes one endpoint for draft-ietf-httpapi-idempotency-key-header-07 behaviour
and reports each case as MUST, SHOULD or MAY. BODY may contain {{unique}}.
Exit status: 0 no MUST case failed (-strict: no MUST or SHOULD case), 1 one
did, 2 usage or connection error. See docs/idemcheck.md.

`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.url, "url", "", "the endpoint `URL` (with -openapi: the base URL the document's paths are joined to)")
	fs.StringVar(&o.method, "X", "POST", "the request `METHOD`")
	fs.StringVar(&o.body, "d", "", "the request `BODY`; {{unique}} is replaced per logical request; @file reads a file")
	fs.Var(&o.headers, "H", "a header for every request, 'Name: value' (repeatable)")
	fs.Var(&o.tenant2, "tenant2", "a header of a second identity, replacing the same-named -H header (repeatable)")
	fs.BoolVar(&o.strict, "strict", false, "exit 1 when a SHOULD case fails too")
	fs.BoolVar(&o.json, "json", false, "write the report as JSON")
	fs.StringVar(&o.junit, "junit", "", "also write the report as JUnit XML to `FILE`")
	fs.Var(&o.slowHeader, "slow-header", "a header that makes the request take long, 'Name: value', for the concurrency cases (repeatable)")
	fs.StringVar(&o.slowBody, "slow-body", "", "a `BODY` that makes the request take long, for the concurrency cases")
	fs.Var(&o.failHeader, "fail-header", "a header that makes the target answer with a 5xx, 'Name: value' (repeatable)")
	fs.StringVar(&o.openapi, "openapi", "", "an OpenAPI 3 document `FILE`: check every POST and PATCH operation declaring the key header")
	fs.StringVar(&o.keyHeader, "key-header", "Idempotency-Key", "the key's header `NAME`")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for one answer")
	fs.DurationVar(&o.slowTimeout, "slow-timeout", 60*time.Second, "how long to wait for one answer when a slow hint is given")
	fs.BoolVar(&o.quiet, "q", false, "no progress line")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print what would be checked and how many requests it takes; send nothing")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { o.methodSet = o.methodSet || f.Name == "X" })
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q (flags come first, each with its value)", fs.Arg(0))
	}
	return o, nil
}

// usageError is a problem with the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// common builds the part of a target every endpoint shares.
func (o *options) common() (*target, error) {
	t := &target{keyHeader: http.CanonicalHeaderKey(o.keyHeader)}
	if !validToken(t.keyHeader) {
		return nil, usagef("-key-header %q is not a header name", o.keyHeader)
	}
	t.header = o.headers.header()
	if t.header == nil {
		t.header = http.Header{}
	}
	if t.header.Get(t.keyHeader) != "" {
		return nil, usagef("-H sets %s: idemcheck sends its own keys", t.keyHeader)
	}
	t.tenant2 = o.tenant2.header()
	if t.tenant2 != nil {
		same := true
		for name, values := range t.tenant2 {
			if strings.Join(values, "\n") != strings.Join(t.header.Values(name), "\n") {
				same = false
			}
		}
		if same {
			return nil, usagef("-tenant2 gives the same headers as -H: it must name another identity")
		}
	}
	t.slowHdr = o.slowHeader.header()
	t.failHdr = o.failHeader.header()
	t.slowBody = o.slowBody
	return t, nil
}

// targets resolves the endpoints to check, and the operations of an OpenAPI
// document that are not checked (with the reason).
func (o *options) targets() ([]*target, []string, error) {
	if o.url == "" {
		return nil, nil, usagef("-url is required")
	}
	u, err := url.Parse(o.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, nil, usagef("-url %q is not an http or https URL", o.url)
	}
	method := strings.ToUpper(o.method)
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodConnect:
		return nil, nil, usagef("-X %s is a safe method: the key only matters on methods such as POST and PATCH", method)
	}
	if !validToken(method) {
		return nil, nil, usagef("-X %q is not a method", o.method)
	}
	base, err := o.common()
	if err != nil {
		return nil, nil, err
	}
	if o.openapi != "" {
		if o.body != "" {
			return nil, nil, usagef("-d and -openapi exclude each other: the bodies come from the document's examples")
		}
		only := ""
		if o.methodSet {
			only = method
		}
		return openapiTargets(o.openapi, o.url, only, base)
	}
	body := o.body
	if strings.HasPrefix(body, "@") {
		b, err := os.ReadFile(body[1:])
		if err != nil {
			return nil, nil, usagef("-d: %v", err)
		}
		body = string(b)
	}
	t := *base
	t.method, t.url, t.body = method, o.url, body
	t.name = method + " " + o.url
	t.header = defaultContentType(t.header, body)
	return []*target{&t}, nil, nil
}

// defaultContentType sets Content-Type: application/json when none is
// given and the body is JSON.
func defaultContentType(h http.Header, body string) http.Header {
	if h.Get("Content-Type") != "" || body == "" || !json.Valid(render(body, "x")) {
		return h
	}
	h = h.Clone()
	h.Set("Content-Type", "application/json")
	return h
}

// run is the whole command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, "idemcheck:", err)
		return 2
	}
	if err != nil {
		return 2 // the flag package has printed the error and the usage
	}
	targets, skipped, err := o.targets()
	if err != nil {
		fmt.Fprintln(stderr, "idemcheck:", err)
		return 2
	}
	if len(targets) == 0 {
		fmt.Fprintln(stderr, "idemcheck: the OpenAPI document has no POST or PATCH operation declaring", o.keyHeader)
		for _, s := range skipped {
			fmt.Fprintln(stderr, "  not checked:", s)
		}
		return 2
	}

	prefix := newPrefix()
	total := 0
	for _, t := range targets {
		total += budget(t)
	}
	where := targets[0].name
	if len(targets) > 1 {
		where = fmt.Sprintf("%d operations under %s", len(targets), o.url)
	}
	fmt.Fprintf(stderr, "idemcheck: at most %d requests to %s, keys idemcheck-%s-*; requests the target accepts run the endpoint for real\n",
		total, where, prefix)
	if o.dryRun {
		writePlan(stdout, targets, skipped)
		return 0
	}

	client := newClient()
	defer client.CloseIdleConnections()
	tty := !o.quiet && isTerminal(stderr)
	rep := &report{strict: o.strict, skipped: skipped}
	seq := 0
	for _, t := range targets {
		timeout := o.timeout
		if t.hasSlow() && o.slowTimeout > timeout {
			timeout = o.slowTimeout
		}
		r := newRunner(t, client, timeout, prefix, &seq)
		b := budget(t)
		results := r.run(func(i, n int, name string) {
			if tty {
				fmt.Fprintf(stderr, "\r\033[K%s: case %d/%d %s, %d/%d requests", t.name, i+1, n, name, r.requests(), b)
			}
		})
		if tty {
			fmt.Fprint(stderr, "\r\033[K")
		}
		if err := r.aborted(); err != nil {
			fmt.Fprintf(stderr, "idemcheck: %s: %v\n", t.name, err)
			return 2
		}
		rep.targets = append(rep.targets, targetReport{name: t.name, prefix: prefix, requests: r.requests(), budget: b, results: results, diagnosis: r.diagnosis()})
	}

	if o.json {
		err = rep.writeJSON(stdout)
	} else {
		err = rep.writeTable(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "idemcheck:", err)
		return 2
	}
	if o.junit != "" {
		if err := writeFile(o.junit, rep.writeJUnit); err != nil {
			fmt.Fprintln(stderr, "idemcheck: -junit:", err)
			return 2
		}
	}
	return rep.exitStatus()
}

func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writePlan lists, for -dry-run, the cases each target would run.
func writePlan(w io.Writer, targets []*target, skipped []string) {
	for _, t := range targets {
		fmt.Fprintf(w, "%s: at most %d requests\n", t.name, budget(t))
		for _, p := range probes {
			if reason := p.needs(t); reason != "" {
				fmt.Fprintf(w, "  %-20s not run: %s\n", p.name, reason)
			} else {
				fmt.Fprintf(w, "  %-20s at most %d %s\n", p.name, p.max, plural(p.max, "request"))
			}
		}
	}
	for _, s := range skipped {
		fmt.Fprintln(w, "not checked:", s)
	}
}

// isTerminal reports whether w is a terminal, where a progress line that
// rewrites itself is welcome.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
