// The tutorial's sessions: every console block of docs/tutorial.md is
// replayed against the running example its "<!-- run: ... -->" note names,
// and every line it shows must be in the real output. Its go and sh blocks
// are checked with every other document's, in docs_blocks_test.go.
package examples_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testservers"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// TestTutorialBlocks checks the kinds of the tutorial's blocks: go and sh
// blocks are checked by TestDocsGoBlocks and TestDocsShellBlocks; a console
// block is either a session replayed by TestTutorialSessions, and so says
// where, or a program's output, checked by TestDocsProgramOutputs.
func TestTutorialBlocks(t *testing.T) {
	blocks := readBlocks(t, "docs/tutorial.md")
	if len(blocks) < 10 {
		t.Fatalf("found only %d code blocks in the tutorial", len(blocks))
	}
	for _, b := range blocks {
		switch b.lang {
		case "go", "sh":
		case "console":
			if !strings.HasPrefix(b.note, "run: ") && !strings.HasPrefix(b.note, "output: ") {
				t.Errorf("%s: console block without a <!-- run: ... --> or <!-- output: ... --> note", b.at())
			}
		default:
			t.Errorf("%s: block of unknown kind %q", b.at(), b.lang)
		}
	}
}

// TestTutorialSessions replays every console block against its example.
func TestTutorialSessions(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed to replay the tutorial's sessions: install it (apt-get install curl)")
	}
	blocks := readBlocks(t, "docs/tutorial.md")
	bin := t.TempDir()
	servers := map[string]string{}
	for _, b := range blocks {
		name, ok := strings.CutPrefix(b.note, "run: ")
		if b.lang != "console" || !ok {
			continue
		}
		addr, ok := servers[name]
		if !ok {
			addr = startExample(t, bin, name, nil)
			servers[name] = addr
		}
		replay(t, b, addr)
	}
	if len(servers) < 5 {
		t.Fatalf("only %d examples were run", len(servers))
	}

	// The durable example on PostgreSQL, in a database of its own, answers
	// exactly as it does on SQLite.
	dsn := testservers.Optional(t, testservers.PostgresDSN)
	if dsn == "" {
		return // -short
	}
	addr := startExample(t, bin, "durable", []string{"DATABASE_URL=" + freshDatabase(t, dsn)})
	for _, b := range blocks {
		if b.note == "run: durable" {
			replay(t, b, addr)
		}
	}
}

// replay runs each "$ " command of b and checks that the lines shown after
// it are what it printed, all of them and in order: a transcript is what
// curl prints, trimmed of nothing. A Date header is the one line whose
// value may differ, as long as the real one is a date.
func replay(t *testing.T, b block, addr string) {
	t.Helper()
	type step struct {
		cmd  string
		want []string
	}
	var steps []step
	for _, line := range strings.Split(b.text, "\n") {
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			steps = append(steps, step{cmd: cmd})
		} else if len(steps) > 0 {
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	// One shell runs the whole block, as a reader's terminal would, so a
	// command sent to the background is still running for the next one.
	// Each command's output ends with a marker line of its own (after a
	// newline, as a body may not end with one).
	var script strings.Builder
	for i, s := range steps {
		fmt.Fprintf(&script, "%s\nprintf '\\n@@ step %d @@\\n'\n", strings.ReplaceAll(s.cmd, "localhost:8080", addr), i)
	}
	script.WriteString("wait\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-c", script.String()).Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", b.at(), err, out)
	}
	rest := strings.ReplaceAll(string(out), "\r\n", "\n")
	for i, s := range steps {
		printed, after, ok := strings.Cut(rest, fmt.Sprintf("\n@@ step %d @@\n", i))
		if !ok {
			t.Fatalf("%s: %s\nprinted no end marker; the output was:\n%s", b.at(), s.cmd, out)
		}
		rest = after
		if got, want := trimBlankEnd(strings.Split(printed, "\n")), trimBlankEnd(s.want); !sameTranscript(got, want) {
			t.Errorf("%s: %s\nshows:\n%s\nbut curl printed:\n%s", b.at(), s.cmd, strings.Join(want, "\n"), strings.Join(got, "\n"))
		}
	}
}

// trimBlankEnd drops the blank lines that end lines.
func trimBlankEnd(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// sameTranscript reports whether the lines a document shows are the lines
// printed, a Date header's value aside.
func sameTranscript(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		g, gok := strings.CutPrefix(got[i], "Date: ")
		_, wok := strings.CutPrefix(want[i], "Date: ")
		if gok && wok {
			if _, err := http.ParseTime(g); err == nil {
				continue
			}
		}
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// startExample builds an example program and starts it on a free port,
// in a directory of its own, and returns its host:port.
func startExample(t *testing.T, bin, name string, env []string) string {
	t.Helper()
	exe := filepath.Join(bin, name)
	if _, err := os.Stat(exe); err != nil {
		build := exec.Command("go", "build", "-o", exe, "./"+name)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
	}
	addr := freeAddr(t)
	startProgram(t, exe, []string{"-addr=" + addr}, env, addr)
	return addr
}

// freeAddr returns a loopback host:port that nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startProgram starts exe with args, in a directory of its own, waits
// until addr accepts connections, and stops the program when t ends.
func startProgram(t *testing.T, exe string, args, env []string, addr string) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		leftIgnored(t, cmd.Dir)
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start listening on %s", filepath.Base(exe), addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freshDatabase creates an empty database on the server of dsn, and a
// role that owns it, by running the commands that docs/tutorial.md and
// docs/operations.md give for that (the same in both, in a
// <!-- db: postgres --> block), and returns the DSN by which that role
// connects to it. The example's order ids then start at 1, and the example
// runs as the role the documentation recommends rather than as a
// superuser. It also checks that the tutorial connects as that role.
func freshDatabase(t *testing.T, dsn string) string {
	t.Helper()
	var cmds string
	for _, doc := range []string{"docs/tutorial.md", "docs/operations.md"} {
		var found bool
		for _, b := range readBlocks(t, doc) {
			if b.note != "db: postgres" {
				continue
			}
			if cmds != "" && b.text != cmds {
				t.Fatalf("%s: the PostgreSQL set-up differs from the tutorial's:\n%s", b.at(), b.text)
			}
			cmds, found = b.text, true
		}
		if !found {
			t.Fatalf("%s has no <!-- db: postgres --> block", doc)
		}
	}
	m := regexp.MustCompile(`CREATE ROLE (\w+) LOGIN PASSWORD '([^']+)';\nCREATE DATABASE (\w+) OWNER (\w+);`).FindStringSubmatch(cmds)
	if m == nil || m[1] != m[4] {
		t.Fatalf("docs/tutorial.md: the PostgreSQL set-up creates no role owning a database:\n%s", cmds)
	}
	role, password, name := m[1], m[2], m[3]
	tutorial, err := os.ReadFile(filepath.Join(repoRoot, "docs", "tutorial.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("DATABASE_URL=postgres://%s:%s@127.0.0.1:5432/%s go run", role, password, name)
	if !strings.Contains(string(tutorial), want) {
		t.Errorf("docs/tutorial.md does not connect as the role it creates: no %q", want)
	}

	// The commands run as they stand, against the test's server: there,
	// the superuser is the DSN's, so `sudo -u postgres` becomes psql's
	// environment. Unique names keep runs apart.
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatal("psql is needed to run the tutorial's PostgreSQL set-up: install postgresql-client")
	}
	suffix := strings.ToLower(rand.Text()[:10])
	uniqueRole, uniqueName := role+"_"+suffix, name+"_"+suffix
	cmds = regexp.MustCompile(`\b`+role+`\b`).ReplaceAllString(cmds, uniqueRole)
	cmds = regexp.MustCompile(`\b`+name+`\b`).ReplaceAllString(cmds, uniqueName)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", uniqueName))
		db.Exec(fmt.Sprintf("DROP ROLE IF EXISTS %s", uniqueRole))
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	sudo := `sudo() { [ "$1" = -u ] && [ "$2" = postgres ] || return 1; shift 2; "$@"; }` + "\n"
	cmd := exec.Command("bash", "-c", sudo+cmds)
	password0, _ := u.User.Password()
	cmd.Env = append(os.Environ(), "PGHOST="+u.Hostname(), "PGPORT="+u.Port(), "PGUSER="+u.User.Username(),
		"PGPASSWORD="+password0, "PGDATABASE="+strings.TrimPrefix(u.Path, "/"), "PGSSLMODE=disable")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docs/tutorial.md: the PostgreSQL set-up failed: %v\n%s", err, out)
	}
	u.User = url.UserPassword(uniqueRole, password)
	u.Path = "/" + uniqueName
	return u.String()
}

// leftIgnored fails t unless the repository's .gitignore ignores every
// file a program left in dir, its working directory: run from a clone, as
// the documents say, it must leave git status clean (the SQLite file, its
// journal and the store's lock file).
func leftIgnored(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !gitIgnored(t, e.Name()) {
			t.Errorf("a program run from the clone leaves %s, which .gitignore does not ignore", e.Name())
		}
	}
}

// gitIgnored reports whether a file named name in the repository's root
// matches a pattern of its .gitignore, which holds only patterns without a
// slash inside (they match a name in any folder) and folders.
func gitIgnored(t *testing.T, name string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Split(string(b), "\n") {
		if p = strings.TrimSpace(p); p == "" || strings.HasPrefix(p, "#") || strings.Contains(p, "/") {
			continue
		}
		if ok, err := filepath.Match(p, name); err != nil {
			t.Fatalf(".gitignore: %q: %v", p, err)
		} else if ok {
			return true
		}
	}
	return false
}
