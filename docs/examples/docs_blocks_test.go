package examples_test

// The code blocks of README.md and docs/*.md are checked here, so that no
// snippet can drift from the code. A block is told apart by the HTML
// comment on the line before its fence:
//
//   - <!-- file: DIR/main.go --> before a go block: the block is part of the
//     example program docs/examples/DIR/main.go, verbatim, and that
//     program is built. If the first such block of a document has the
//     package clause, the document shows the whole program: its blocks for
//     that file, in order, must make up the file exactly. The tutorial shows
//     every program whole.
//   - <!-- program: NAME --> before a go block: the block is a complete
//     program. It is built, with every example program, in a module of its
//     own outside the repository, set up the way the tutorial tells a new
//     user to (see TestDocsProgramsBuildOutsideTheRepo).
//   - <!-- install: NAME --> before an sh block: the `go get` lines that
//     program NAME (an example directory or a program block) needs.
//   - <!-- checkout: NAME --> before an sh block: the lines that point a
//     module at a checkout of the repository instead, for program NAME.
//   - <!-- run: NAME --> before a console block: a session replayed against
//     program NAME, each command's output shown exactly as curl prints it.
//   - <!-- output: NAME --> before a console block: `$ go run
//     ./docs/examples/NAME` and what the program prints, exactly.
//   - <!-- db: postgres --> before an sh block: the commands that create the
//     PostgreSQL role and database the tutorial uses, the same in the
//     tutorial and in operations.md, run against a real server.
//
// A go block with neither a file nor a program note fails the test.

import (
	"bufio"
	"context"
	"encoding/json"
	"go/format"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
)

// repoRoot is the repository's root, from this module's directory.
const repoRoot = "../.."

// rootModule is the path of the repository's root module.
const rootModule = "github.com/idemkit/idemkit"

type block struct {
	doc  string // repository path of the document
	line int    // where the fence opens, for messages
	lang string // go, console, sh, ...
	note string // "file: gin/main.go", "run: gin"
	text string
}

func (b block) at() string { return b.doc + ":" + strconv.Itoa(b.line) }

// readBlocks returns the fenced code blocks of a document, given by its
// path from the repository's root, each with the note before it.
func readBlocks(t *testing.T, doc string) []block {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, doc))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []block
	var cur *block
	note := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		case strings.HasPrefix(line, "```"):
			cur = &block{doc: doc, line: n, lang: strings.TrimPrefix(line, "```"), note: note}
			note = ""
		case strings.HasPrefix(line, "<!-- ") && strings.HasSuffix(line, " -->"):
			note = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- "), " -->")
		case strings.TrimSpace(line) != "":
			note = ""
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s: the block opened at line %d is never closed", doc, cur.line)
	}
	return blocks
}

// documents lists README.md and docs/*.md.
func documents(t *testing.T) []string {
	t.Helper()
	docs := []string{"README.md"}
	matches, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range matches {
		docs = append(docs, "docs/"+filepath.Base(m))
	}
	if len(docs) < 8 {
		t.Fatalf("found only %v", docs)
	}
	return docs
}

func allBlocks(t *testing.T) []block {
	var all []block
	for _, doc := range documents(t) {
		all = append(all, readBlocks(t, doc)...)
	}
	return all
}

// TestDocsGoBlocks checks every go block: an excerpt is in its example
// program as written, a whole program shown is the file, a program block
// parses as a complete program, and the example programs they come from
// build. The program blocks are built by TestDocsProgramsBuildOutsideTheRepo.
func TestDocsGoBlocks(t *testing.T) {
	dirs := map[string]bool{}
	type shown struct {
		whole bool
		parts []string
		doc   string
	}
	files := map[string]*shown{} // per document and file
	excerpts, programs := 0, 0
	for _, b := range allBlocks(t) {
		if b.lang != "go" {
			continue
		}
		checkImportNames(t, b)
		switch kind, name, _ := strings.Cut(b.note, ": "); kind {
		case "file":
			src, err := os.ReadFile(name)
			if err != nil {
				t.Errorf("%s: %v", b.at(), err)
				continue
			}
			if !strings.Contains(string(src), b.text) {
				t.Errorf("%s: the block is not in docs/examples/%s as written:\n%s", b.at(), name, b.text)
			}
			key := b.doc + " " + name
			if files[key] == nil {
				files[key] = &shown{whole: packageClause.MatchString(b.text), doc: b.doc}
			}
			files[key].parts = append(files[key].parts, b.text)
			dirs["./"+filepath.Dir(name)] = true
			excerpts++
		case "program":
			f, err := parser.ParseFile(token.NewFileSet(), name+".go", b.text, parser.ImportsOnly)
			if err != nil || f.Name.Name != "main" {
				t.Errorf("%s: program %s is not a complete main package: %v", b.at(), name, err)
			}
			if formatted, err := format.Source([]byte(b.text)); err == nil && string(formatted) != b.text {
				t.Errorf("%s: program %s is not gofmt-formatted; gofmt would write:\n%s", b.at(), name, formatted)
			}
			programs++
		default:
			t.Errorf("%s: go block without a <!-- file: DIR/main.go --> or <!-- program: NAME --> note", b.at())
		}
	}
	for key, s := range files {
		name := strings.SplitN(key, " ", 2)[1]
		if !s.whole {
			// The tutorial's programs are meant to be pasted: each is
			// shown whole, never in excerpts.
			if s.doc == "docs/tutorial.md" {
				t.Errorf("%s shows only excerpts of docs/examples/%s: show the whole program, beginning with its package clause", s.doc, name)
			}
			continue
		}
		src, _ := os.ReadFile(name)
		if got := strings.Join(s.parts, "\n"); got != string(src) {
			t.Errorf("%s shows the whole of docs/examples/%s, but its blocks put together differ from the file:\n%s", s.doc, name, got)
		}
	}
	if excerpts < 15 || programs < 1 {
		t.Fatalf("found only %d excerpts and %d programs", excerpts, programs)
	}
	// Build every example program a block comes from.
	args := []string{"build", "-o", t.TempDir() + string(filepath.Separator)}
	for d := range dirs {
		args = append(args, d)
	}
	slices.Sort(args[3:])
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("%d excerpts of %d example programs, %d program blocks", excerpts, len(dirs), programs)
}

// packageClause matches the package clause that begins a whole program,
// after its doc comment.
var packageClause = regexp.MustCompile(`(?m)^package \w+$`)

// importName matches a named import of a package of the repository, in a
// go block or in the text: idem "github.com/idemkit/idemkit/core".
var importName = regexp.MustCompile(`(?m)(?:^|[\s` + "`" + `(])([a-z][a-z0-9]*) "(github\.com/idemkit/idemkit(?:/[a-z0-9/]+)?)"`)

// unnamedCore matches an import of the core without a name.
var unnamedCore = regexp.MustCompile(`(?m)(?:^\s*|\bimport\s+)"github\.com/idemkit/idemkit/core"`)

// checkImportNames checks that a block imports the core by its name,
// idem, which differs from the last element of its path. The other names
// are checked against the packages by TestDocsImportNames.
func checkImportNames(t *testing.T, b block) {
	t.Helper()
	if unnamedCore.MatchString(b.text) {
		t.Errorf(`%s: import the core by its name: idem "github.com/idemkit/idemkit/core"`, b.at())
	}
}

// TestDocsImportNames checks every named import of an idemkit package in
// the documents, in code or prose, against the package's real name.
func TestDocsImportNames(t *testing.T) {
	checked := 0
	for _, doc := range documents(t) {
		src, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range importName.FindAllStringSubmatch(string(src), -1) {
			if got := packageName(t, m[2]); got != m[1] {
				t.Errorf("%s: imports %s as %s, but its package is named %s", doc, m[2], m[1], got)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("only %d named imports found", checked)
	}
}

// packageName returns the name of the package at an import path of the
// repository.
func packageName(t *testing.T, importPath string) string {
	t.Helper()
	dir := filepath.Join(repoRoot, filepath.FromSlash(strings.TrimPrefix(strings.TrimPrefix(importPath, rootModule), "/")))
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		pf, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly)
		if err == nil {
			return pf.Name.Name
		}
	}
	return "(no package at " + importPath + ")"
}

// TestDocsShellBlocks checks the commands of the README and the tutorial
// and of every install or checkout block: a `go get` names a module of
// this repository, or one the examples require; a `go run` an example
// program; a replace, a module's directory beside the clone; the clone and
// the new module are where the replace lines say, as
// TestDocsProgramsBuildOutsideTheRepo sets them up.
func TestDocsShellBlocks(t *testing.T) {
	required := examplesRequire(t)
	checked := 0
	for _, b := range allBlocks(t) {
		kind, _, _ := strings.Cut(b.note, ": ")
		if b.lang != "sh" || b.doc != "docs/tutorial.md" && b.doc != "README.md" && kind != "install" && kind != "checkout" {
			continue
		}
		if kind == "db" {
			continue // run against a real server by TestTutorialSessions
		}
		for _, line := range strings.Split(strings.TrimSpace(b.text), "\n") {
			checkShellLine(t, b, line, required)
			checked++
		}
	}
	if checked < 8 {
		t.Fatalf("only %d shell lines checked", checked)
	}
	// Until the first release a user builds from a clone: every program
	// of the README and the tutorial whose modules they name for `go get`
	// gets the replace lines that stand for them, not only the first. (The
	// other pages point to the tutorial's section 1 for that.)
	checkouts := map[string]bool{}
	for _, b := range allBlocks(t) {
		if name, ok := strings.CutPrefix(b.note, "checkout: "); ok {
			checkouts[name] = true
		}
	}
	for _, b := range allBlocks(t) {
		tutorial := b.doc == "README.md" || b.doc == "docs/tutorial.md"
		if name, ok := strings.CutPrefix(b.note, "install: "); ok && tutorial && !checkouts[name] {
			t.Errorf("%s: no <!-- checkout: %s --> block gives the replace lines for %s before the first release", b.at(), name, name)
		}
	}
}

// examplesRequire returns the modules this module requires.
func examplesRequire(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}}", "all").Output()
	if err != nil {
		t.Fatal(err)
	}
	req := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		req[p] = true
	}
	return req
}

// moduleDir returns the directory of a module of the repository, and
// whether it is one.
func moduleDir(path string) (string, bool) {
	dir := strings.TrimPrefix(strings.TrimPrefix(path, rootModule), "/")
	if !strings.HasPrefix(path, rootModule) {
		return "", false
	}
	mod, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(dir), "go.mod"))
	if err != nil || !strings.HasPrefix(string(mod), "module "+path+"\n") {
		return "", false
	}
	if dir == "" {
		dir = "."
	}
	return dir, true
}

// withRequired returns path, if it is a module of the repository, and
// the other modules of the repository it requires, directly or not, but
// the root: a checkout must replace those too (the adapters of Echo and
// Fiber require the module they share, in adapters/internal). Replace
// lines in a dependency's go.mod do not apply to the module using it.
func withRequired(t *testing.T, path string) []string {
	t.Helper()
	dir, ok := moduleDir(path)
	if !ok {
		return nil
	}
	out := []string{path}
	cmd := exec.Command("go", "mod", "edit", "-json", filepath.Join(repoRoot, filepath.FromSlash(dir), "go.mod"))
	js, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json %s/go.mod: %v", dir, err)
	}
	var mod struct{ Require []struct{ Path string } }
	if err := json.Unmarshal(js, &mod); err != nil {
		t.Fatal(err)
	}
	for _, r := range mod.Require {
		if r.Path == rootModule {
			continue
		}
		for _, p := range withRequired(t, r.Path) {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

func checkShellLine(t *testing.T, b block, line string, required map[string]bool) {
	t.Helper()
	fields := strings.Fields(line)
	for len(fields) > 0 && strings.Contains(fields[0], "=") {
		fields = fields[1:] // an environment assignment
	}
	switch {
	case len(fields) == 3 && fields[0] == "go" && fields[1] == "get":
		if _, ok := moduleDir(fields[2]); !ok && !required[fields[2]] {
			t.Errorf("%s: %q gets neither a module of this repository nor one the examples use", b.at(), line)
		}
	case len(fields) == 3 && fields[0] == "go" && fields[1] == "run" && fields[2] != ".":
		example, ok := strings.CutPrefix(fields[2], "./docs/examples/")
		if _, err := os.Stat(filepath.Join(example, "main.go")); !ok || err != nil {
			t.Errorf("%s: %q runs no example program", b.at(), line)
		}
	case len(fields) == 5 && fields[0] == "go" && fields[1] == "mod" && fields[2] == "edit" && fields[3] == "-replace":
		path, dir, _ := strings.Cut(fields[4], "=")
		want, ok := moduleDir(path)
		if !ok || filepath.Clean(dir) != filepath.Join("../idemkit", want) {
			t.Errorf("%s: %q does not replace a module of this repository with its directory in ../idemkit", b.at(), line)
		}
	case line == "go mod tidy":
	case line == "git clone https://"+rootModule:
	case line == "cd idemkit":
		// The clone's directory, which the replace lines call ../idemkit.
	case line == "mkdir shop && cd shop && go mod init example.com/shop":
		// A module beside the clone, as the replace lines expect.
	case line == "go run .":
	default:
		t.Errorf("%s: unexpected shell line %q", b.at(), line)
	}
}

// TestDocsProgramsBuildOutsideTheRepo follows the documents as a new user
// would, in a module of their own beside a checkout of the repository:
// every example program and every program block is put into it, the
// install blocks' `go get` lines are turned into the replace lines the
// checkout block shows, and go mod tidy and go build must succeed with no
// workspace. Then each program block with a session is run and its
// session replayed.
func TestDocsProgramsBuildOutsideTheRepo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every program in a module of its own: not in -short")
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if err := os.Symlink(root, filepath.Join(tmp, "idemkit")); err != nil {
		t.Fatal(err)
	}
	shop := filepath.Join(tmp, "shop")
	gomod := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = shop
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("in a module of its own: go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if err := os.MkdirAll(shop, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod("mod", "init", "example.com/shop")

	// The programs: each example directory, and each program block, whose
	// address the test moves to a free port.
	blocks := allBlocks(t)
	addrs := map[string]string{}
	var names []string
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if src, err := os.ReadFile(filepath.Join(e.Name(), "main.go")); err == nil && e.IsDir() {
			writeProgram(t, shop, e.Name(), string(src))
			names = append(names, e.Name())
		}
	}
	for _, b := range blocks {
		if name, ok := strings.CutPrefix(b.note, "program: "); ok && b.lang == "go" {
			addrs[name] = freeAddr(t)
			writeProgram(t, shop, name, strings.ReplaceAll(b.text, "127.0.0.1:8080", addrs[name]))
			names = append(names, name)
		}
	}

	// The install lines, turned into replace lines as the checkout block
	// says, which must show exactly that.
	replaced := map[string]bool{rootModule: true}
	replace := func(path string) string {
		dir, _ := moduleDir(path)
		return "go mod edit -replace " + path + "=" + filepath.ToSlash(filepath.Join("../idemkit", dir))
	}
	installs := map[string][]string{}
	for _, b := range blocks {
		if name, ok := strings.CutPrefix(b.note, "install: "); ok {
			for _, line := range strings.Split(strings.TrimSpace(b.text), "\n") {
				if path, ok := strings.CutPrefix(line, "go get "); ok {
					installs[name] = append(installs[name], path)
				}
			}
		}
	}
	for _, name := range names {
		if len(installs[name]) == 0 {
			t.Errorf("no <!-- install: %s --> block says which modules program %s needs", name, name)
		}
		for _, path := range installs[name] {
			for _, path := range withRequired(t, path) {
				replaced[path] = true
			}
		}
	}
	checkouts := 0
	for _, b := range blocks {
		name, ok := strings.CutPrefix(b.note, "checkout: ")
		if !ok {
			continue
		}
		want := []string{replace(rootModule)}
		for _, path := range installs[name] {
			for _, path := range withRequired(t, path) {
				if path != rootModule && !slices.Contains(want, replace(path)) {
					want = append(want, replace(path))
				}
			}
		}
		want = append(want, "go mod tidy")
		if got := strings.Split(strings.TrimSpace(b.text), "\n"); !slices.Equal(got, want) {
			t.Errorf("%s: the checkout lines for %s should be\n%s", b.at(), name, strings.Join(want, "\n"))
		}
		checkouts++
	}
	if checkouts == 0 {
		t.Error("no <!-- checkout: ... --> block tells a user how to use a checkout")
	}
	for path := range replaced {
		dir, _ := moduleDir(path)
		gomod("mod", "edit", "-replace", path+"="+filepath.ToSlash(filepath.Join("../idemkit", dir)))
	}
	gomod("mod", "tidy")
	bin := filepath.Join(tmp, "bin")
	gomod("build", "-o", bin+string(filepath.Separator), "./...")
	t.Logf("built %v outside the repository", names)

	for name, addr := range addrs {
		started := false
		for _, b := range blocks {
			if b.note == "run: "+name {
				if !started {
					startProgram(t, filepath.Join(bin, name), nil, nil, addr)
					started = true
				}
				replay(t, b, addr)
			}
		}
	}
}

// TestDocsProgramOutputs runs each example program whose output a
// document shows and compares what it prints with the page.
func TestDocsProgramOutputs(t *testing.T) {
	bin := t.TempDir()
	shown := 0
	for _, b := range allBlocks(t) {
		name, ok := strings.CutPrefix(b.note, "output: ")
		if !ok {
			continue
		}
		cmd, want, _ := strings.Cut(b.text, "\n")
		if cmd != "$ go run ./docs/examples/"+name {
			t.Errorf("%s: the block should begin with $ go run ./docs/examples/%s", b.at(), name)
			continue
		}
		exe := filepath.Join(bin, name)
		if out, err := exec.Command("go", "build", "-o", exe, "./"+name).CombinedOutput(); err != nil {
			t.Fatalf("%s: build %s: %v\n%s", b.at(), name, err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, exe).Output()
		cancel()
		if err != nil {
			t.Fatalf("%s: %s: %v\n%s", b.at(), name, err, out)
		}
		if string(out) != want {
			t.Errorf("%s: the page shows\n%s\nbut %s printed\n%s", b.at(), want, name, out)
		}
		shown++
	}
	if shown == 0 {
		t.Error("no <!-- output: NAME --> block found")
	}
}

// writeProgram writes a program into directory name of the module at dir.
func writeProgram(t *testing.T, dir, name, src string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestOperationsKeyHash runs the command operations.md gives for finding a
// key's hash in the logs, checks the output it shows, and checks that the
// Engine logs that very hash for the key.
func TestOperationsKeyHash(t *testing.T) {
	var b *block
	for _, blk := range readBlocks(t, "docs/operations.md") {
		if blk.note == "run: key-hash" {
			b = &blk
		}
	}
	if b == nil {
		t.Fatal("docs/operations.md has no <!-- run: key-hash --> block")
	}
	lines := strings.Split(strings.TrimSpace(b.text), "\n")
	cmd, ok := strings.CutPrefix(lines[0], "$ ")
	if !ok || len(lines) != 2 {
		t.Fatalf("%s: want one command and the line it prints", b.at())
	}
	out, err := exec.Command("bash", "-c", cmd).Output()
	if err != nil {
		t.Fatalf("%s: %v", b.at(), err)
	}
	if got := strings.TrimSpace(string(out)); got != lines[1] {
		t.Errorf("%s: the command prints %s, the page shows %s", b.at(), got, lines[1])
	}
	key := regexp.MustCompile(`'([0-9a-f-]{36})'`).FindStringSubmatch(cmd)
	secret := regexp.MustCompile(`-hmac '([^']+)'`).FindStringSubmatch(cmd)
	if key == nil || secret == nil {
		t.Fatalf("%s: no key or no secret in %q", b.at(), cmd)
	}

	var logged string
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store, KeyHashSecret: []byte(secret[1]), OnEvent: func(_ context.Context, ev idemevent.Event) {
		if ev.Kind == idemevent.First {
			logged = ev.KeyHash()
		}
	}})
	req := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", `"`+key[1]+`"`)
	idemhttp.Middleware(engine)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(httptest.NewRecorder(), req)
	if logged != lines[1] {
		t.Errorf("the Engine logs key_hash=%s for %q; operations.md says to look for %s", logged, key[1], lines[1])
	}
}
