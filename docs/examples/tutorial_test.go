// The tutorial's tests: every code block of docs/tutorial.md is exercised.
//   - a go block must appear verbatim in the example program its
//     "<!-- file: ... -->" note names, and every example program is built;
//   - a console block is replayed against the running example its
//     "<!-- run: ... -->" note names, and every line it shows must be in
//     the real output;
//   - an sh block's `go get` must name a module of this repository and its
//     `go run` an example that exists.
package examples_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

type block struct {
	line int    // where the fence opens, for messages
	lang string // go, console, sh
	note string // "file: gin/main.go", "run: gin"
	text string
}

func readTutorial(t *testing.T) []block {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "tutorial.md"))
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
			cur = &block{line: n, lang: strings.TrimPrefix(line, "```"), note: note}
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
	if len(blocks) < 10 {
		t.Fatalf("found only %d code blocks in the tutorial", len(blocks))
	}
	return blocks
}

// TestTutorialCodeIsTheExamples checks every go block against the example
// program it comes from; the programs themselves are compiled by go vet
// and go test, and run by TestTutorialSessions.
func TestTutorialCodeIsTheExamples(t *testing.T) {
	checked := 0
	for _, b := range readTutorial(t) {
		switch b.lang {
		case "go":
			file, ok := strings.CutPrefix(b.note, "file: ")
			if !ok {
				t.Errorf("tutorial.md:%d: go block without a <!-- file: ... --> note", b.line)
				continue
			}
			src, err := os.ReadFile(file)
			if err != nil {
				t.Errorf("tutorial.md:%d: %v", b.line, err)
				continue
			}
			if !strings.Contains(string(src), b.text) {
				t.Errorf("tutorial.md:%d: the block is not in %s as written:\n%s", b.line, file, b.text)
			}
			checked++
		case "sh":
			for _, line := range strings.Split(strings.TrimSpace(b.text), "\n") {
				checkShellLine(t, b.line, line)
			}
			checked++
		case "console":
			if !strings.HasPrefix(b.note, "run: ") {
				t.Errorf("tutorial.md:%d: console block without a <!-- run: ... --> note", b.line)
			}
		default:
			t.Errorf("tutorial.md:%d: block of unknown kind %q", b.line, b.lang)
		}
	}
	t.Logf("checked %d go and sh blocks", checked)
}

// checkShellLine checks an installation or run command of the tutorial.
func checkShellLine(t *testing.T, at int, line string) {
	fields := strings.Fields(line)
	for i, f := range fields {
		if strings.Contains(f, "=") && i == 0 {
			continue // an environment assignment
		}
		fields = fields[i:]
		break
	}
	switch {
	case len(fields) == 3 && fields[0] == "go" && fields[1] == "get":
		dir := strings.TrimPrefix(fields[2], "github.com/idemkit/idemkit")
		mod, err := os.ReadFile(filepath.Join("..", "..", dir, "go.mod"))
		if err != nil || !strings.HasPrefix(string(mod), "module "+fields[2]+"\n") {
			t.Errorf("tutorial.md:%d: %q names no module of this repository", at, line)
		}
	case len(fields) == 3 && fields[0] == "go" && fields[1] == "run":
		example, ok := strings.CutPrefix(fields[2], "./docs/examples/")
		if _, err := os.Stat(filepath.Join(example, "main.go")); !ok || err != nil {
			t.Errorf("tutorial.md:%d: %q runs no example program", at, line)
		}
	default:
		t.Errorf("tutorial.md:%d: unexpected shell line %q", at, line)
	}
}

// TestTutorialSessions replays every console block against its example.
func TestTutorialSessions(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed to replay the tutorial's sessions: install it (apt-get install curl)")
	}
	blocks := readTutorial(t)
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
				t.Fatalf("tutorial.md:%d: %s\nshows %q, but the output was:\n%s", b.line, s.cmd, w, outputs[i])
			}
		}
	}
}

// startExample builds and starts an example program on a free port, in a
// directory of its own, and returns its host:port.
func startExample(t *testing.T, bin, name string, env []string) string {
	t.Helper()
	exe := filepath.Join(bin, name)
	if _, err := os.Stat(exe); err != nil {
		build := exec.Command("go", "build", "-o", exe, "./"+name)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(exe)
	cmd.Dir = t.TempDir()
	cmd.Env = append(append(os.Environ(), "ADDR="+addr), env...)
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
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("example %s did not start listening on %s", name, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freshDatabase creates an empty database on the server of dsn and returns
// its DSN, so the example's order ids start at 1.
func freshDatabase(t *testing.T, dsn string) string {
	t.Helper()
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	name := "tutorial_" + strings.ToLower(rand.Text()[:10])
	if err := db.Exec("CREATE DATABASE " + name).Error; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec(fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name))
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	i := strings.LastIndex(dsn, "/")
	q := strings.Index(dsn[i:], "?")
	if q < 0 {
		return dsn[:i+1] + name
	}
	return dsn[:i+1] + name + dsn[i+q:]
}
