package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/internal/redact"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1 // the store failed, or refused the operation
	exitUsage    = 2 // bad command line
	exitNotFound = 3 // get or forget found no record
)

const usage = `usage: idemctl get|forget|stats|purge (-store STORE | -admin URL) [flags]

  get      describe the record of -scope and -key (its body only with -body)
  forget   delete the record of -scope and -key, so that the key runs anew
           (a record in flight only with -force, fenced by its holder's token)
  stats    count the records by state, expired ones, and the largest scopes
  purge    delete the expired records

STORE is a SQLite file path, a postgres:// or mysql:// URL (or the
key=value or user:pass@tcp(host)/db forms), or a redis:// URL; URL is the
admin endpoint of a running process (idemadmin.Handler). Instead of -store,
-store-file FILE or the environment variable IDEMCTL_STORE give the STORE,
so that its password stays out of the process list; the admin endpoint's
token comes from IDEMCTL_ADMIN_TOKEN or -admin-token-file.
-key - (or -scope -) reads the value from a line of standard input.
Scopes and keys are never printed unless -show-key is given; passwords
never.
`

// The environment variables idemctl reads.
const (
	storeEnv      = "IDEMCTL_STORE"
	adminTokenEnv = "IDEMCTL_ADMIN_TOKEN"
)

// config is the command line.
type config struct {
	op, store, admin    string
	adminToken          string
	scope, key          string
	table, prefix       string
	json, showKey, body bool
	force               bool
	top, batch          int
	timeout             time.Duration
}

// run is idemctl with its arguments and streams; it returns the exit code.
// Whatever it prints of an error goes through redact.Scrub first, with the
// secrets of every argument, of the STORE read from a file or the
// environment and of the admin token: a driver's error may quote a DSN.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var secrets []string
	for _, a := range args {
		secrets = append(secrets, redact.Secrets(a)...)
	}
	cfg, err := parse(args, stdin, stderr)
	secrets = append(secrets, redact.Secrets(cfg.store)...)
	secrets = append(secrets, redact.Secrets(cfg.admin)...)
	secrets = append(secrets, cfg.adminToken)
	say := func(format string, a ...any) {
		io.WriteString(stderr, redact.Scrub(fmt.Sprintf(format, a...), secrets...))
	}
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			say("idemctl: %v\n", err)
		}
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	err = execute(ctx, cfg, stdout)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, idem.ErrNotFound):
		say("idemctl: no record of this scope and key\n")
		return exitNotFound
	default:
		say("idemctl: %v\n", err)
		return exitFailed
	}
}

func parse(args []string, stdin io.Reader, stderr io.Writer) (config, error) {
	cfg := config{timeout: 30 * time.Second, top: 10, batch: idemadmin.DefaultPurgeBatch}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(stderr, usage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			return cfg, flag.ErrHelp
		}
		return cfg, errors.New("name an operation first: get, forget, stats or purge")
	}
	cfg.op = args[0]
	switch cfg.op {
	case "get", "forget", "stats", "purge":
	default:
		fmt.Fprint(stderr, usage)
		return cfg, fmt.Errorf("unknown operation %q: get, forget, stats or purge", cfg.op)
	}
	fs := flag.NewFlagSet("idemctl "+cfg.op, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage+"\nflags:\n"); fs.PrintDefaults() }
	var storeFile, tokenFile string
	fs.StringVar(&cfg.store, "store", "", "the store: SQLite file path, postgres:// or mysql:// URL, or redis:// URL (or -store-file, or "+storeEnv+")")
	fs.StringVar(&storeFile, "store-file", "", "a file holding the store's DSN, which then stays out of the process list")
	fs.StringVar(&cfg.admin, "admin", "", "a running process's admin endpoint instead of -store, e.g. http://127.0.0.1:9091/idemadmin")
	fs.StringVar(&tokenFile, "admin-token-file", "", "-admin: a file holding the endpoint's token (or set "+adminTokenEnv+")")
	fs.StringVar(&cfg.scope, "scope", "", "the record's scope (tenant); - reads it from standard input")
	fs.StringVar(&cfg.key, "key", "", "the record's idempotency key; - reads it from standard input")
	fs.StringVar(&cfg.table, "table", "", "SQL: the records' table (default the store's, idem_records)")
	fs.StringVar(&cfg.prefix, "prefix", "", "Redis: the records' key prefix (default the store's, idem:; the demo's is payments:idem:)")
	fs.BoolVar(&cfg.json, "json", false, "print JSON")
	fs.BoolVar(&cfg.showKey, "show-key", false, "get: print the scope and key too")
	fs.BoolVar(&cfg.body, "body", false, "get: print the stored body")
	fs.BoolVar(&cfg.force, "force", false, "forget: delete a record in flight too (its holder then fails to record its response)")
	fs.IntVar(&cfg.top, "top", cfg.top, "stats: how many of the largest scopes to list")
	fs.IntVar(&cfg.batch, "batch", cfg.batch, "purge: records deleted per statement")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "give up after this long")
	if err := fs.Parse(args[1:]); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q: scopes and keys go in -scope and -key", fs.Arg(0))
	}
	if err := readSecrets(&cfg, storeFile, tokenFile); err != nil {
		return cfg, err
	}
	if (cfg.store == "") == (cfg.admin == "") {
		return cfg, errors.New("give one of -store and -admin (a STORE may also come from -store-file or " + storeEnv + ")")
	}
	if cfg.top < 0 || cfg.batch <= 0 || cfg.timeout <= 0 {
		return cfg, errors.New("-top must not be negative, -batch and -timeout must be positive")
	}
	if cfg.admin != "" && (cfg.table != "" || cfg.prefix != "") {
		return cfg, errors.New("-table and -prefix are the running process's with -admin")
	}
	if cfg.op != "get" && cfg.op != "forget" {
		if cfg.scope != "" || cfg.key != "" {
			return cfg, fmt.Errorf("%s takes no -scope or -key", cfg.op)
		}
		return cfg, nil
	}
	in := bufio.NewReader(stdin)
	for _, v := range []*string{&cfg.scope, &cfg.key} {
		if *v != "-" {
			continue
		}
		line, err := in.ReadString('\n')
		if err != nil && (!errors.Is(err, io.EOF) || line == "") {
			return cfg, errors.New("-scope - and -key - read one line each from standard input, scope first: none came")
		}
		*v = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	}
	if cfg.key == "" {
		return cfg, fmt.Errorf("%s needs -key (and -scope, unless the store's scope is empty)", cfg.op)
	}
	return cfg, nil
}

// readSecrets completes cfg with the STORE of storeFile or of storeEnv
// (when -store is not given), and the admin token of tokenFile or of
// adminTokenEnv.
func readSecrets(cfg *config, storeFile, tokenFile string) error {
	switch {
	case storeFile != "" && cfg.store != "":
		return errors.New("give -store or -store-file, not both")
	case storeFile != "":
		b, err := os.ReadFile(storeFile)
		if err != nil {
			return fmt.Errorf("-store-file: %w", err)
		}
		if cfg.store = strings.TrimSpace(string(b)); cfg.store == "" {
			return fmt.Errorf("-store-file %s is empty", storeFile)
		}
	case cfg.store == "" && cfg.admin == "":
		cfg.store = strings.TrimSpace(os.Getenv(storeEnv))
	}
	cfg.adminToken = strings.TrimSpace(os.Getenv(adminTokenEnv))
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return fmt.Errorf("-admin-token-file: %w", err)
		}
		cfg.adminToken = strings.TrimSpace(string(b))
	}
	return nil
}

// execute runs cfg's operation and prints its result.
func execute(ctx context.Context, cfg config, stdout io.Writer) error {
	b, err := open(ctx, cfg)
	if err != nil {
		return err
	}
	defer b.close()
	now := time.Now()
	id := idem.ID{Scope: cfg.scope, Key: cfg.key}
	switch cfg.op {
	case "get":
		in, err := b.reader.Inspect(ctx, id)
		if err != nil {
			return err
		}
		in.Expired = in.ExpiredAt(now)
		if !cfg.body {
			in.Body = nil
		}
		return printInfo(stdout, cfg, in)
	case "stats":
		st, err := b.reader.RecordStats(ctx, now, cfg.top)
		if err != nil {
			return err
		}
		if b.note != "" && st.Note == "" {
			st.Note = b.note
		}
		return printStats(stdout, cfg, st)
	}
	if b.writer == nil {
		return b.refusal
	}
	if cfg.op == "forget" {
		if err := b.writer.Forget(ctx, id, cfg.force); err != nil {
			if errors.Is(err, idemadmin.ErrInFlight) {
				return fmt.Errorf("%w (add -force to delete it: the holder then cannot record its response, and the key runs anew)", err)
			}
			return err
		}
		if cfg.json {
			return writeJSON(stdout, map[string]bool{"forgotten": true})
		}
		_, err := fmt.Fprintln(stdout, "forgotten: the key runs anew on its next request")
		return err
	}
	n, err := idemadmin.PurgeAll(ctx, b.writer, now, cfg.batch)
	if err != nil {
		return fmt.Errorf("purge, after %d records: %w", n, err)
	}
	if cfg.json {
		return writeJSON(stdout, idemadmin.PurgeResult{Purged: n})
	}
	_, err = fmt.Fprintf(stdout, "purged %d expired records\n", n)
	return err
}

// shown is the JSON of get: the record, and its ID with -show-key.
type shown struct {
	Scope *string `json:"scope,omitempty"`
	Key   *string `json:"key,omitempty"`
	idemadmin.Info
}

func printInfo(w io.Writer, cfg config, in idemadmin.Info) error {
	if cfg.json {
		out := shown{Info: in}
		if cfg.showKey {
			out.Scope, out.Key = &cfg.scope, &cfg.key
		}
		return writeJSON(w, out)
	}
	var b strings.Builder
	line := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "%-12s "+format+"\n", append([]any{name}, args...)...)
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	if cfg.showKey {
		line("scope", "%q", cfg.scope)
		line("key", "%q", cfg.key)
	}
	line("state", "%s", in.State)
	line("expired", "%t", in.Expired)
	line("fingerprint", "%s", in.Fingerprint)
	line("created", "%s", at(in.CreatedAt))
	line("completed", "%s", at(in.CompletedAt))
	line("expires", "%s", at(in.ExpiresAt))
	if in.State == idem.InFlight.String() {
		line("lease token", "%s", in.LeaseToken)
		line("lease until", "%s", at(in.LeaseUntil))
	} else {
		line("status", "%d", in.Status)
		headers, _ := terminalSafe([]byte(strings.Join(in.HeaderNames, ", ")))
		line("headers", "%s", headers)
		line("body size", "%d bytes", in.BodySize)
	}
	line("location", "%s", in.Location)
	if cfg.body && in.Body != nil {
		body, escaped := terminalSafe(in.Body)
		if escaped {
			b.WriteString("\n(bytes a terminal would act on are shown escaped, as \\xNN or \\uNNNN; -json gives the body exactly, in base64)")
		}
		b.WriteString("\n")
		b.WriteString(body)
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// terminalSafe returns body as text a terminal shows and does not act on:
// line feeds, tabs and printable characters as they are; every other
// control character (ESC and the sequences it starts, CR, BEL, DEL, the
// C1 controls), a byte that is not UTF-8, and the characters that reorder
// text (bidirectional overrides) escaped as \xNN or \uNNNN. escaped says
// whether any was.
func terminalSafe(body []byte) (text string, escaped bool) {
	var b strings.Builder
	for len(body) > 0 {
		r, size := utf8.DecodeRune(body)
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, "\\x%02x", body[0])
			escaped = true
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
			escaped = true
		case r >= 0x80 && r <= 0x9f, unicode.Is(unicode.Bidi_Control, r), !unicode.IsPrint(r) && !unicode.IsSpace(r):
			fmt.Fprintf(&b, "\\u%04x", r)
			escaped = true
		default:
			b.Write(body[:size])
		}
		body = body[size:]
	}
	return b.String(), escaped
}

func printStats(w io.Writer, cfg config, st idemadmin.Stats) error {
	if cfg.json {
		return writeJSON(w, st)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "completed          %d\n", st.Completed)
	fmt.Fprintf(&b, "in flight          %d\n", st.InFlight)
	if st.InFlight > 0 {
		fmt.Fprintf(&b, "oldest in flight   %s\n", st.OldestInFlight.UTC().Format(time.RFC3339))
		fmt.Fprintf(&b, "oldest lease end   %s\n", st.OldestLeaseEnd.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "expired (to purge) %d\n", st.Expired)
	if len(st.TopScopes) > 0 {
		b.WriteString("largest scopes (SHA-256 of the scope):\n")
		for _, s := range st.TopScopes {
			fmt.Fprintf(&b, "  %-64s %d\n", s.Scope, s.Records)
		}
	}
	if st.Note != "" {
		fmt.Fprintf(&b, "note: %s\n", st.Note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
