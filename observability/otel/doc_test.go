package idemotel

import (
	"os"
	"regexp"
	"strings"
	"testing"

	idem "github.com/idemkit/idemkit/core"
)

// The package doc lists the outcome and reason values the Engine emits;
// this keeps the list from drifting from the code.
func TestDocListsEveryOutcomeAndReason(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(strings.ReplaceAll(string(src), "//", "")), " ")
	list := func(label string) []string {
		m := regexp.MustCompile(label + ` \(([^)]*)\)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("doc.go has no %q list", label)
		}
		return strings.Split(strings.ReplaceAll(m[1], " ", ""), ",")
	}
	var kinds, reasons []string
	for _, k := range idem.EventKinds() {
		kinds = append(kinds, k.String())
	}
	for _, r := range idem.Reasons() {
		reasons = append(reasons, string(r))
	}
	if got := list("outcome is the event kind"); strings.Join(got, ",") != strings.Join(kinds, ",") {
		t.Errorf("doc.go outcomes %v, the Engine emits %v", got, kinds)
	}
	if got := list("reason is set on not-stored only"); strings.Join(got, ",") != strings.Join(reasons, ",") {
		t.Errorf("doc.go reasons %v, the Engine uses %v", got, reasons)
	}
}
