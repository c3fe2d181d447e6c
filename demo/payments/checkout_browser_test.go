package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
)

// picturesEnv names the folder where the browser test writes its picture
// of the page after a flaky checkout as checkout.png: `make pictures` sets
// it to docs/img, for docs/tutorial.md and the demo's README. Unset, the
// picture goes to a temporary folder, so that a test run leaves the
// working tree as it found it.
const picturesEnv = "IDEMKIT_PICTURES"

// screenshotPath returns where the browser test writes its picture.
func screenshotPath(t *testing.T) string {
	dir := os.Getenv(picturesEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	return filepath.Join(dir, "checkout.png")
}

// chromium returns the path of Debian's chromium browser, found on PATH
// (/usr/bin/chromium), or of the browser IDEMKIT_CHROMIUM names; it fails
// the test if there is none.
func chromium(t *testing.T) string {
	t.Helper()
	name := "chromium"
	if p := os.Getenv("IDEMKIT_CHROMIUM"); p != "" {
		name = p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("Chromium is missing (%v): install Debian's `chromium` package (apt-get install chromium), "+
			"which the checkout page's browser test drives", err)
	}
	return p
}

// browser starts a headless Chromium with a fresh profile, for one test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		// The machine may have no network: nothing but the page's own
		// origin is ever contacted.
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	return ctx
}

// attempt is one row of the page's timeline, as its data attributes say.
type attempt struct {
	Attempt  string `json:"attempt"`
	Status   string `json:"status"`
	Replayed string `json:"replayed"`
	RetryIn  string `json:"retryIn"` // milliseconds to the next attempt, "" for none
	Key      string `json:"key"`
}

// timeline is what the page's timeline shows.
type timeline struct {
	Payments int       `json:"payments"`
	Attempts []attempt `json:"attempts"`
	Notes    []string  `json:"notes"`
	Outcomes []string  `json:"outcomes"`
	Charge   string    `json:"charge"`
}

const readTimeline = `(() => ({
	payments: document.querySelectorAll("#timeline .payment").length,
	attempts: Array.from(document.querySelectorAll("#timeline .attempt"), (e) => ({
		attempt: e.dataset.attempt, status: e.dataset.status, replayed: e.dataset.replayed, retryIn: e.dataset.retryIn,
		key: e.querySelector(".key").textContent,
	})),
	notes: Array.from(document.querySelectorAll("#timeline .note"), (e) => e.textContent),
	outcomes: Array.from(document.querySelectorAll("#timeline li.outcome"), (e) => e.dataset.outcome),
	charge: document.querySelector("#timeline .payment")?.dataset.charge ?? "",
}))()`

// TestCheckoutInBrowser: in a real browser, with the flaky network on,
// Pay clicked twice quickly charges once; the timeline shows the retries
// (with one key, after Retry-After on 409) and the replayed answer; Pay
// pressed again afterwards, from the keyboard, gets the recorded answer
// and charges nothing more; a declined card is not retried. It takes a
// screenshot of the page after the flaky checkout (see picturesEnv). On a
// demo without fault injection, the switch is off and disabled, the page
// says so, and a payment goes out unfaulted.
func TestCheckoutInBrowser(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DB, cfg.ProviderLatency = filepath.Join(t.TempDir(), "p.db"), 20*time.Millisecond
	cfg.FaultInjection = true
	d := start(t, cfg)
	ctx := browser(t)
	acct := newAccount()

	if err := chromedp.Do(ctx,
		chromedp.Navigate(d.url+"/"),
		chromedp.WaitVisible(`html[data-ready="true"] #pay`),
		chromedp.SetValue(`#account`, acct),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("account").dispatchEvent(new Event("change"))`),
		// The switch from the keyboard: focus it, press Space.
		chromedp.Focus(`#flaky`),
		chromedp.KeyEvent(" "),
	); err != nil {
		t.Fatal(err)
	}
	if on, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("flaky").checked`)); err != nil || !on {
		t.Fatalf("the flaky switch is not on after Space (%v)", err)
	}

	// Two quick clicks on Pay: one payment.
	if err := chromedp.Do(ctx, chromedp.Click(`#pay`), chromedp.Click(`#pay`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#timeline li.outcome`)); err != nil {
		t.Fatalf("no outcome on the page: %v", err)
	}
	tl, err := chromedp.Run(ctx, chromedp.Evaluate[timeline](readTimeline))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("timeline: %+v", tl)
	if tl.Payments != 1 || len(tl.Outcomes) != 1 || tl.Outcomes[0] != "succeeded" || !strings.HasPrefix(tl.Charge, "ch_") {
		t.Fatalf("the page shows %d payments, outcomes %v, charge %q: want one payment, charged", tl.Payments, tl.Outcomes, tl.Charge)
	}
	if len(tl.Notes) == 0 || !strings.Contains(tl.Notes[0], "Pay pressed again") {
		t.Errorf("the second click left no note on the timeline: %v", tl.Notes)
	}
	retried, replayed := len(tl.Attempts) > 1, false
	for _, a := range tl.Attempts {
		replayed = replayed || a.Replayed == "true"
		if a.Key != tl.Attempts[0].Key || !strings.HasPrefix(a.Key, `"`) || !strings.HasSuffix(a.Key, `"`) {
			t.Errorf("attempt %s sent key %s, the first %s: want one sf-string key for every attempt", a.Attempt, a.Key, tl.Attempts[0].Key)
		}
	}
	if !retried && !replayed {
		t.Fatalf("the flaky network made no retry and no replay: %+v", tl.Attempts)
	}
	for _, a := range tl.Attempts {
		// The demo's 409 says Retry-After: 1.
		if ms, err := strconv.Atoi(a.RetryIn); a.Status == "409" && (err != nil || ms < 1000) {
			t.Errorf("attempt %s got 409 with Retry-After: 1 and retried after %q ms", a.Attempt, a.RetryIn)
		}
	}

	// The server's account of it: exactly one charge, taken once.
	if b, p := d.balance(t, acct), d.provider(t, acct); b["charges"] != 1.0 || b["charged"] != 1999.0 || p["authorizations"] != 1.0 {
		t.Fatalf("after a double-clicked flaky checkout: balance %v, provider %v; want one charge of 1999, authorized once", b, p)
	}
	// The page's balance says so too.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](
		fmt.Sprintf(`document.getElementById("balance").dataset.account === %q && document.getElementById("balance-charges").textContent === "1"`, acct),
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the page's balance does not show the charge: %v", err)
	}

	// Pay again, from the keyboard (Enter in a field submits the form):
	// the same payment, the same key, the recorded answer.
	if err := chromedp.Do(ctx,
		chromedp.Focus(`#amount`),
		chromedp.KeyEvent("\r"),
		void(chromedp.Poll[bool](`document.querySelectorAll("#timeline li.outcome").length === 2`, chromedp.WithPollingTimeout(20*time.Second))),
	); err != nil {
		t.Fatalf("Pay from the keyboard: %v", err)
	}
	if tl, err = chromedp.Run(ctx, chromedp.Evaluate[timeline](readTimeline)); err != nil {
		t.Fatal(err)
	}
	last := tl.Attempts[len(tl.Attempts)-1]
	if tl.Payments != 1 || last.Key != tl.Attempts[0].Key || last.Status != "201" || last.Replayed != "true" {
		t.Fatalf("Pay pressed again: %d payments, last attempt %+v; want the same payment's answer replayed", tl.Payments, last)
	}
	if b := d.balance(t, acct); b["charges"] != 1.0 {
		t.Fatalf("Pay pressed again charged again: balance %v", b)
	}

	checkAccessible(t, ctx)
	if err := chromedp.Do(ctx, chromedp.Blur(`#amount`)); err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	shotPath := screenshotPath(t)
	if err := os.MkdirAll(filepath.Dir(shotPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shotPath, shot, 0o644); err != nil {
		t.Fatal(err)
	}

	// A declined card is the payment's answer: one attempt, no retry.
	before := d.provider(t, acct)
	if err := chromedp.Do(ctx,
		chromedp.Click(`#new-payment`),
		chromedp.Click(`#flaky`),
		chromedp.SetValue(`#customer`, "cus_declined"),
		chromedp.Click(`#pay`),
		void(chromedp.Poll[bool](`document.querySelectorAll("#timeline .payment").length === 2 && document.querySelector("#timeline .payment").dataset.outcome === "refused"`,
			chromedp.WithPollingTimeout(20*time.Second))),
	); err != nil {
		t.Fatalf("a declined payment: %v", err)
	}
	declined, err := chromedp.Run(ctx, chromedp.Evaluate[[]attempt](`Array.from(document.querySelectorAll("#timeline .payment:first-child .attempt"), (e) => ({attempt: e.dataset.attempt, status: e.dataset.status, key: e.querySelector(".key").textContent}))`))
	if err != nil {
		t.Fatal(err)
	}
	if len(declined) != 1 || declined[0].Status != "402" || declined[0].Key == tl.Attempts[0].Key {
		t.Fatalf("a declined payment's attempts: %+v; want one, 402, with a new key", declined)
	}
	if p := d.provider(t, acct); p["calls"] != before["calls"].(float64)+1 || p["authorizations"] != 1.0 {
		t.Fatalf("provider %v after the decline, %v before: want one call more, and still 1 authorization", p, before)
	}

	checkPhoneWidth(t, ctx)
	checkFaultInjectionOff(t, ctx)
}

// checkFaultInjectionOff: on a demo started without fault injection, the
// page's flaky-network switch is disabled and off, even in a browser that
// kept it on, the page says how the operator turns it on, and Pay sends
// the payment unfaulted: one attempt, charged.
func checkFaultInjectionOff(t *testing.T, ctx context.Context) {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.DB, cfg.ProviderLatency = filepath.Join(t.TempDir(), "off.db"), 0
	d := start(t, cfg)
	acct := newAccount()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(d.url+"/"),
		chromedp.WaitVisible(`html[data-ready="true"] #pay`),
		// This browser had the switch on.
		chromedp.Evaluate[chromedp.Void](`localStorage.setItem("payments-demo.flaky", "on")`),
		chromedp.Reload(),
		chromedp.WaitVisible(`html[data-ready="true"] #pay`),
	); err != nil {
		t.Fatal(err)
	}
	type state struct {
		Disabled, Checked bool
		Hint              string
	}
	s, err := chromedp.Run(ctx, chromedp.Evaluate[state](`(() => {
		const f = document.getElementById("flaky");
		return {Disabled: f.disabled, Checked: f.checked, Hint: document.getElementById("flaky-hint").textContent};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Disabled || s.Checked || !strings.Contains(s.Hint, "Off on this server") || !strings.Contains(s.Hint, "-fault-injection") {
		t.Fatalf("without fault injection the switch is %+v; want it disabled, off, and its hint to say how to turn it on", s)
	}
	checkAccessible(t, ctx)
	if err := chromedp.Do(ctx,
		chromedp.SetValue(`#account`, acct),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("account").dispatchEvent(new Event("change"))`),
		chromedp.Click(`#pay`),
		chromedp.WaitVisible(`#timeline li.outcome`),
	); err != nil {
		t.Fatalf("Pay without fault injection: %v", err)
	}
	tl, err := chromedp.Run(ctx, chromedp.Evaluate[timeline](readTimeline))
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Attempts) != 1 || tl.Attempts[0].Status != "201" || len(tl.Outcomes) != 1 || tl.Outcomes[0] != "succeeded" {
		t.Fatalf("a payment without fault injection: %+v; want one attempt, charged", tl)
	}
}

// checkAccessible holds the page to what a keyboard or screen-reader user
// needs: a language, a label for every control, a name for every button,
// and text contrast of at least 4.5:1 (WCAG AA) against what is behind it.
func checkAccessible(t *testing.T, ctx context.Context) {
	t.Helper()
	const audit = `(() => {
	const problems = [];
	if (!document.documentElement.lang) problems.push("no lang on <html>");
	for (const c of document.querySelectorAll("input, select, textarea")) {
		if (c.labels.length === 0 && !c.getAttribute("aria-label")) problems.push("no label for #" + c.id);
	}
	for (const b of document.querySelectorAll("button")) {
		if (b.textContent.trim() === "" && !b.getAttribute("aria-label")) problems.push("a button without a name");
	}
	const rgb = (s) => (s.match(/[\d.]+/g) || []).map(Number);
	const lum = ([r, g, b]) => {
		const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
		return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
	};
	const background = (e) => {
		for (; e; e = e.parentElement) {
			const c = rgb(getComputedStyle(e).backgroundColor);
			if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
		}
		return [255, 255, 255];
	};
	const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
	for (let n = walker.nextNode(); n; n = walker.nextNode()) {
		const e = n.parentElement;
		if (!n.textContent.trim() || !e || e.closest("[hidden]") || !e.getClientRects().length) continue;
		const fg = lum(rgb(getComputedStyle(e).color)), bg = lum(background(e));
		const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
		if (ratio < 4.5) problems.push("contrast " + ratio.toFixed(2) + ":1 for " + JSON.stringify(n.textContent.trim().slice(0, 40)));
	}
	return problems;
})()`
	problems, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](audit))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("accessibility: %s", p)
	}
}

// checkPhoneWidth: at a phone's width the page needs no sideways
// scrolling.
func checkPhoneWidth(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(360, 740)); err != nil {
		t.Fatal(err)
	}
	type widths struct {
		Content, Window int
		Beyond          []string // the elements that stick out
	}
	// Measured once the page has been laid out at the new width.
	wide, err := chromedp.Run(ctx, chromedp.Evaluate[widths](`new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(() => {
		const w = document.documentElement.clientWidth;
		const beyond = Array.from(document.querySelectorAll("body *"))
			.filter((e) => e.getBoundingClientRect().right > w + 0.5)
			.map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.className ? "." + e.className : ""));
		const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
		for (let n = walker.nextNode(); n; n = walker.nextNode()) {
			const r = document.createRange();
			r.selectNodeContents(n);
			if (r.getBoundingClientRect().right > w + 0.5) beyond.push(JSON.stringify(n.textContent.trim().slice(0, 40)));
		}
		resolve({Content: document.documentElement.scrollWidth, Window: w, Beyond: beyond.slice(0, 10)});
	})))`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if wide.Content > wide.Window {
		t.Fatalf("at 360 px the page is %d px wide in a %d px window: it scrolls sideways (%v)", wide.Content, wide.Window, wide.Beyond)
	}
}

// void drops an action's value, for chromedp.Do.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}
