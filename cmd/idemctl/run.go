package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/internal/redact"
	"github.com/idemkit/idemkit/stores/gorm/opendb"
	redisstore "github.com/idemkit/idemkit/stores/redis"
	"github.com/redis/go-redis/v9"
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
-key takes the key bare (order-7), as idemkit keeps it, or as the
Idempotency-Key header carries it ("order-7", an RFC 9651 string, decoded).
-key - (or -scope -) reads the value from a line of standard input.
Scopes and keys are never printed unless -show-key is given; passwords
never.
`

// The environment variables idemctl reads.
const (
	storeEnv      = "IDEMCTL_STORE"
	adminTokenEnv = "IDEMCTL_ADMIN_TOKEN"
	// secretEnv keys the hashes stats shows for scopes (idemadmin.ScopeLabel).
	secretEnv = "IDEMCTL_SECRET"
)

// scopeSecret is the secret of secretEnv, or a random one: the labels then
// tell the scopes of one output apart, and nothing more.
func scopeSecret() []byte {
	if s := os.Getenv(secretEnv); s != "" {
		return []byte(s)
	}
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

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
// With -json an error is also written to stdout, as a JSON object.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var secrets []string
	for _, a := range args {
		secrets = append(secrets, redact.Secrets(a)...)
	}
	cfg, err := parse(args, stdin, stdout, stderr)
	secrets = append(secrets, redact.Secrets(cfg.store)...)
	secrets = append(secrets, redact.Secrets(cfg.admin)...)
	secrets = append(secrets, cfg.adminToken)
	fail := func(code int, err error) int {
		var f *failure
		if !errors.As(err, &f) {
			f = &failure{err: err}
		}
		msg := redact.Scrub(err.Error(), secrets...)
		hints := make([]string, len(f.hints))
		io.WriteString(stderr, "idemctl: "+msg+"\n")
		for i, h := range f.hints {
			hints[i] = redact.Scrub(h, secrets...)
			io.WriteString(stderr, "  hint: "+hints[i]+"\n")
		}
		if cfg.json || code == exitUsage && jsonAsked(args) {
			writeJSON(stdout, jsonError{Error: msg, Exit: code, Kind: kindOf(code), LookedUp: redact.Scrub(f.lookedUp, secrets...),
				Hints: hints, Purged: f.purged})
		}
		return code
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		return fail(exitUsage, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	err = execute(ctx, cfg, stdout)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, idem.ErrNotFound):
		return fail(exitNotFound, notFound(cfg, err))
	default:
		return fail(exitFailed, err)
	}
}

// failure is an error with what idemctl says beside it: where it looked,
// what to try, how many records a purge deleted before it failed.
type failure struct {
	err      error
	lookedUp string
	hints    []string
	purged   *int
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// jsonError is what -json writes to stdout for an error.
type jsonError struct {
	Error string `json:"error"`
	// Exit is the exit code, Kind its name: usage, failed, not-found.
	Exit     int      `json:"exit"`
	Kind     string   `json:"kind"`
	LookedUp string   `json:"looked_up,omitempty"`
	Hints    []string `json:"hints,omitempty"`
	// Purged is how many records a purge deleted before it failed, when
	// that is known (not through -admin, whose answer was lost).
	Purged *int `json:"purged,omitempty"`
}

func kindOf(code int) string {
	switch code {
	case exitUsage:
		return "usage"
	case exitNotFound:
		return "not-found"
	}
	return "failed"
}

// jsonAsked reports whether args ask for -json, for a command line too bad
// to be parsed.
func jsonAsked(args []string) bool {
	for _, a := range args {
		switch a {
		case "-json", "--json", "-json=true", "--json=true":
			return true
		}
	}
	return false
}

// notFound is the error for a record get or forget did not find: what was
// looked up (the digests, the table or key, the database), and what to
// try.
func notFound(cfg config, err error) error {
	f := &failure{err: errors.New("no record of this scope and key")}
	var nf *idemadmin.NotFoundError
	if errors.As(err, &nf) {
		f.lookedUp = nf.Location
	}
	if cfg.key != strings.TrimSpace(cfg.key) || cfg.scope != strings.TrimSpace(cfg.scope) {
		f.hints = append(f.hints, "the scope or key begins or ends with a space, which is part of it")
	}
	switch {
	case cfg.admin != "":
		if f.lookedUp == "" {
			f.lookedUp = "through " + cfg.admin
		} else {
			f.lookedUp += ", through " + cfg.admin
		}
	case isRedis(cfg.store):
		db := 0
		if opt, err := redis.ParseURL(cfg.store); err == nil {
			db = opt.DB
		}
		f.lookedUp += fmt.Sprintf(" in database %d of %s", db, redact.DSN(cfg.store))
		prefix := cfg.prefix
		if prefix == "" {
			prefix = redisstore.DefaultPrefix
		}
		f.hints = append(f.hints, fmt.Sprintf("only keys under the prefix %q of database %d were looked at: "+
			"give the application's prefix with -prefix (the demo's is %q), and its database in the URL (redis://HOST:PORT/N)",
			prefix, db, "payments:idem:"))
	default:
		f.lookedUp += " in " + opendb.Label(cfg.store)
		if kind, _ := opendb.KindOf(cfg.store); kind == opendb.SQLite && cfg.op == "get" {
			f.hints = append(f.hints, "on SQLite a record in flight lives in the memory of the process that holds the file, "+
				"not in the file: if one runs, ask it through its admin endpoint (-admin)")
		}
	}
	f.lookedUp = strings.TrimSpace(f.lookedUp)
	f.err = fmt.Errorf("%w (looked up: %s)", f.err, f.lookedUp)
	return f
}

// The flags each operation takes, beside -store, -store-file, -admin,
// -admin-token-file, -json and -timeout, which all take.
var opFlags = map[string][]string{
	"get":    {"scope", "key", "show-key", "body", "table", "prefix"},
	"forget": {"scope", "key", "force", "table", "prefix"},
	"stats":  {"top", "table", "prefix"},
	"purge":  {"batch", "table", "prefix"},
}

func parse(args []string, stdin io.Reader, stdout, stderr io.Writer) (config, error) {
	cfg := config{timeout: 30 * time.Second, top: 10, batch: idemadmin.DefaultPurgeBatch}
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(stdout, usage)
		return cfg, flag.ErrHelp
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprint(stderr, usage)
		return cfg, errors.New("name an operation first: get, forget, stats or purge")
	}
	cfg.op = args[0]
	if _, ok := opFlags[cfg.op]; !ok {
		fmt.Fprint(stderr, usage)
		return cfg, fmt.Errorf("unknown operation %q: get, forget, stats or purge", cfg.op)
	}
	fs := flag.NewFlagSet("idemctl "+cfg.op, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error is reported once, by run
	fs.Usage = func() {}
	var storeFile, tokenFile string
	fs.StringVar(&cfg.store, "store", "", "the store: SQLite file path, postgres:// or mysql:// URL, or redis:// URL (or -store-file, or "+storeEnv+")")
	fs.StringVar(&storeFile, "store-file", "", "a file holding the store's DSN, which then stays out of the process list")
	fs.StringVar(&cfg.admin, "admin", "", "a running process's admin endpoint instead of -store, e.g. http://127.0.0.1:9091/idemadmin")
	fs.StringVar(&tokenFile, "admin-token-file", "", "-admin: a file holding the endpoint's token (or set "+adminTokenEnv+")")
	fs.StringVar(&cfg.scope, "scope", "", "get, forget: the record's scope (tenant); - reads it from standard input")
	fs.StringVar(&cfg.key, "key", "", "get, forget: the record's idempotency key, bare (order-7) or as the Idempotency-Key header carries it (\"order-7\", decoded); - reads it from standard input")
	fs.StringVar(&cfg.table, "table", "", "SQL: the records' table (default the store's, idem_records)")
	fs.StringVar(&cfg.prefix, "prefix", "", "Redis: the records' key prefix (default the store's, idem:; the demo's is payments:idem:)")
	fs.BoolVar(&cfg.json, "json", false, "print JSON, errors included (to standard output)")
	fs.BoolVar(&cfg.showKey, "show-key", false, "get: print the scope and key too")
	fs.BoolVar(&cfg.body, "body", false, "get: print the stored body (escaped as text; exact, in base64, with -json)")
	fs.BoolVar(&cfg.force, "force", false, "forget: delete a record in flight too (its holder then fails to record its response)")
	fs.IntVar(&cfg.top, "top", cfg.top, "stats: how many of the largest scopes to list")
	fs.IntVar(&cfg.batch, "batch", cfg.batch, "purge: records deleted per statement")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "give up after this long, connecting included")
	for _, a := range args[1:] {
		if isHelp(a) {
			fmt.Fprint(stdout, usage+"\nflags of "+cfg.op+":\n")
			fs.SetOutput(stdout)
			fs.VisitAll(func(f *flag.Flag) {
				if applies(cfg.op, f.Name) {
					fmt.Fprintf(stdout, "  -%s\n    \t%s\n", f.Name, f.Usage)
				}
			})
			return cfg, flag.ErrHelp
		}
	}
	if err := fs.Parse(args[1:]); err != nil {
		return cfg, fmt.Errorf("%s: %w (idemctl %s -h lists its flags)", cfg.op, err, cfg.op)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q: scopes and keys go in -scope and -key", fs.Arg(0))
	}
	var misplaced []string
	fs.Visit(func(f *flag.Flag) {
		if !applies(cfg.op, f.Name) {
			misplaced = append(misplaced, "-"+f.Name)
		}
	})
	if len(misplaced) > 0 {
		return cfg, fmt.Errorf("%s does not apply to %s (idemctl %s -h lists its flags)", strings.Join(misplaced, ", "), cfg.op, cfg.op)
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
	switch {
	case cfg.admin != "" && (cfg.table != "" || cfg.prefix != ""):
		return cfg, errors.New("-table and -prefix are the running process's with -admin")
	case cfg.store != "" && isRedis(cfg.store) && cfg.table != "":
		return cfg, errors.New("-table applies to SQL stores; a Redis store's records are found by -prefix")
	case cfg.store != "" && !isRedis(cfg.store) && cfg.prefix != "":
		return cfg, errors.New("-prefix applies to Redis stores; a SQL store's records are found by -table")
	}
	if cfg.op != "get" && cfg.op != "forget" {
		return cfg, nil
	}
	if err := readIDs(&cfg, stdin); err != nil {
		return cfg, err
	}
	if cfg.key == "" {
		return cfg, fmt.Errorf("%s needs -key (and -scope, unless the store's scope is empty)", cfg.op)
	}
	cfg.key = keyArg(cfg.key)
	return cfg, nil
}

// keyArg returns the key that a -key value names. A value that is an RFC
// 9651 sf-string, as the Idempotency-Key header carries a key ("order-7"),
// is decoded as the server decodes the header (escapes decoded,
// parameters ignored): idemkit keeps keys decoded. Any other value is the
// key itself (order-7, bare). So every key can be named: one that itself
// begins and ends with a quote is given in the header's form,
// "\"quoted\"".
func keyArg(v string) string {
	if k, err := idem.ParseKey([]string{v}, true); err == nil {
		return k
	}
	return v
}

func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// applies reports whether the flag name applies to op.
func applies(op, name string) bool {
	switch name {
	case "store", "store-file", "admin", "admin-token-file", "json", "timeout":
		return true
	}
	return slices.Contains(opFlags[op], name)
}

func isRedis(store string) bool {
	return strings.HasPrefix(store, "redis://") || strings.HasPrefix(store, "rediss://")
}

// readIDs reads -scope - and -key - from stdin, one line each, scope
// first. Anything after those lines is an error: the lines of more keys
// would otherwise be ignored. A terminal is not read past them (it has
// no end unless the operator types one).
func readIDs(cfg *config, stdin io.Reader) error {
	in := bufio.NewReader(stdin)
	read := 0
	for _, v := range []*string{&cfg.scope, &cfg.key} {
		if *v != "-" {
			continue
		}
		line, err := in.ReadString('\n')
		if err != nil && (!errors.Is(err, io.EOF) || line == "") {
			return errors.New("-scope - and -key - read one line each from standard input, scope first: none came")
		}
		*v = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		read++
	}
	if read == 0 || isTerminal(stdin) {
		return nil
	}
	rest, err := io.ReadAll(io.LimitReader(in, 1<<20))
	if err != nil {
		return fmt.Errorf("standard input: %w", err)
	}
	if strings.TrimSpace(string(rest)) != "" {
		return fmt.Errorf("standard input has more lines than -scope - and -key - read (%d): idemctl reads one record per run; "+
			"run it once per key", read)
	}
	return nil
}

// isTerminal reports whether r is a terminal (a character device).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
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
			return located(err, b.reader, id)
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
		if cfg.admin == "" { // through -admin, the process showed them
			st = idemadmin.Shown(st, scopeSecret())
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
			err = located(err, b.writer, id)
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
	switch {
	case err != nil && cfg.admin != "" && n == 0:
		// The serving process purges in one request: without its answer,
		// nothing says how many records went.
		return &failure{err: fmt.Errorf("purge through the admin endpoint: %w; the process may have purged records before "+
			"its answer was lost: idemctl stats -admin %s shows how many expired records are left", err, cfg.admin)}
	case err != nil:
		return &failure{err: fmt.Errorf("purge, after %d records: %w", n, err), purged: &n}
	}
	if cfg.json {
		return writeJSON(stdout, idemadmin.PurgeResult{Purged: n})
	}
	_, err = fmt.Fprintf(stdout, "purged %d expired records\n", n)
	return err
}

// located is err, which says a store found no record of id, as an
// idemadmin.NotFoundError with where store looked, if it can say.
func located(err error, store any, id idem.ID) error {
	var nf *idemadmin.NotFoundError
	if !errors.Is(err, idem.ErrNotFound) || errors.As(err, &nf) {
		return err
	}
	return &idemadmin.NotFoundError{Location: idemadmin.Locate(store, id)}
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
	switch {
	case in.State == idem.InFlight.String() && in.NoLease:
		line("lease token", "%s", in.LeaseToken)
		line("lease until", "none: this store takes no leases; the key is held until its handler ends, or its process does")
	case in.State == idem.InFlight.String():
		line("lease token", "%s", in.LeaseToken)
		line("lease until", "%s", at(in.LeaseUntil))
	default:
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
		if st.NoLease {
			b.WriteString("oldest lease end   none: this store takes no leases\n")
		} else {
			fmt.Fprintf(&b, "oldest lease end   %s\n", st.OldestLeaseEnd.UTC().Format(time.RFC3339))
		}
	}
	fmt.Fprintf(&b, "expired (to purge) %d\n", st.Expired)
	if len(st.TopScopes) > 0 {
		b.WriteString("largest scopes (keyed hash of the scope, see " + secretEnv + "):\n")
		for _, s := range st.TopScopes {
			fmt.Fprintf(&b, "  %-16s %d\n", s.Scope, s.Records)
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
