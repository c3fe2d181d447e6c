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
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// TestTutorialBlocks checks the kinds of the tutorial's blocks: go and sh
// blocks are checked by TestDocsGoBlocks and TestDocsShellBlocks, console
// blocks are replayed by TestTutorialSessions and so must say where.
func TestTutorialBlocks(t *testing.T) {
	blocks := readBlocks(t, "docs/tutorial.md")
	if len(blocks) < 10 {
		t.Fatalf("found only %d code blocks in the tutorial", len(blocks))
	}
	for _, b := range blocks {
		switch b.lang {
		case "go", "sh":
		case "console":
			if !strings.HasPrefix(b.note, "run: ") {
				t.Errorf("%s: console block without a <!-- run: ... --> note", b.at())
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
		if b.lang != "console" {
			continue
		}
		name := strings.TrimPrefix(b.note, "run: ")
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
	dsn := os.Getenv("IDEMKIT_TEST_POSTGRES_DSN")
	if dsn == "" {
		if testing.Short() {
			return
		}
		t.Fatal("IDEMKIT_TEST_POSTGRES_DSN is not set: run the tests with `make test`, which starts PostgreSQL")
	}
	addr := startExample(t, bin, "durable", []string{"DATABASE_URL=" + freshDatabase(t, dsn)})
	for _, b := range blocks {
		if b.note == "run: durable" {
			replay(t, b, addr)
		}
	}
}

// replay runs each "$ " command of b and checks the lines shown after it.
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
		} else if strings.TrimSpace(line) != "" && len(steps) > 0 {
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, line)
		}
	}
	// One shell runs the whole block, as a reader's terminal would, so a
	// command sent to the background is still running for the next one.
	var script strings.Builder
	for i, s := range steps {
		fmt.Fprintf(&script, "%s\necho '@@ step %d @@'\n", strings.ReplaceAll(s.cmd, "localhost:8080", addr), i)
	}
	script.WriteString("wait\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "-c", script.String()).Output()
	if err != nil {
		t.Fatalf("tutorial.md:%d: %v\n%s", b.line, err, out)
	}
	outputs := strings.Split(strings.ReplaceAll(string(out), "\r\n", "\n"), "@@ step ")
	for i, s := range steps {
		got := map[string]bool{}
		for _, l := range strings.Split(outputs[i], "\n") {
			got[strings.TrimPrefix(l, fmt.Sprintf("%d @@", i-1))] = true
		}
		for _, w := range s.want {
			if !got[w] {
				t.Fatalf("%s: %s\nshows %q, but the output was:\n%s", b.at(), s.cmd, w, outputs[i])
			}
		}
	}
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
// role that owns it, with the statements docs/operations.md gives for
// that ("Creating the database"), and returns the DSN by which that role
// connects to it. The example's order ids then start at 1, and the example
// runs as the role the documentation recommends rather than as a superuser.
func freshDatabase(t *testing.T, dsn string) string {
	t.Helper()
	var sql string
	for _, b := range readBlocks(t, "docs/operations.md") {
		if b.note == "run: postgres" {
			sql = b.text
		}
	}
	if sql == "" {
		t.Fatal("docs/operations.md has no <!-- run: postgres --> block")
	}
	suffix := strings.ToLower(rand.Text()[:10])
	role, name := "shop_app_"+suffix, "shop_"+suffix
	sql = strings.ReplaceAll(sql, "shop_app", role)
	sql = regexp.MustCompile(`\bshop\b`).ReplaceAllString(sql, name)

	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
		db.Exec(fmt.Sprintf("DROP ROLE IF EXISTS %s", role))
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	for _, stmt := range strings.Split(sql, ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			if err := db.Exec(stmt).Error; err != nil {
				t.Fatalf("docs/operations.md: %s: %v", stmt, err)
			}
		}
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, "change-me")
	u.Path = "/" + name
	return u.String()
}
