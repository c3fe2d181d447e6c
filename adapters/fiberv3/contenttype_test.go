package idemfiber_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v3"

	idemfiber "github.com/idemkit/idemkit/adapters/fiberv3"
	"github.com/idemkit/idemkit/core/idemtest"
)

// TestReplayContentType: fasthttp types a body the handler left untyped
// (text/plain; charset=utf-8) and sends no Content-Type with a response
// that has no body. A replay carries the Content-Type the client received,
// and none when it received none. Responses are read off a real connection
// by net/http's client, which adds no header: the ones checked are the ones
// on the wire.
func TestReplayContentType(t *testing.T) {
	cases := []struct {
		name    string
		handler fiber.Handler
		status  int
		ctype   []string // on the wire, first response and replay alike
	}{
		// SendStatus sets the body "No Content", which a 204 never sends.
		{name: "204/SendStatus", handler: func(c fiber.Ctx) error { return c.SendStatus(fiber.StatusNoContent) }, status: 204},
		{name: "204/StatusOnly", handler: func(c fiber.Ctx) error { c.Status(fiber.StatusNoContent); return nil }, status: 204},
		{name: "200/NoBody", handler: func(c fiber.Ctx) error { c.Status(fiber.StatusOK); return nil }, status: 200},
		{name: "201/UntypedBody", handler: func(c fiber.Ctx) error { return c.Status(fiber.StatusCreated).SendString("created") },
			status: 201, ctype: []string{fiber.MIMETextPlainCharsetUTF8}},
		// Set explicitly, the default type goes on the wire even without a body.
		{name: "204/TypedExplicitly", handler: func(c fiber.Ctx) error {
			c.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
			return c.SendStatus(fiber.StatusNoContent)
		}, status: 204, ctype: []string{fiber.MIMETextPlainCharsetUTF8}},
		{name: "200/JSON", handler: func(c fiber.Ctx) error { return c.JSON(fiber.Map{"ok": true}) },
			status: 200, ctype: []string{fiber.MIMEApplicationJSONCharsetUTF8}},
	}
	e, _ := newEngine(t, nil)
	app := fiber.New(fiber.Config{})
	app.Use(idemfiber.New(e))
	for _, c := range cases {
		app.Post("/"+strings.ReplaceAll(c.name, "/", "-"), c.handler)
	}
	base := listen(t, app)
	send := func(t *testing.T, path string) idemtest.Response {
		t.Helper()
		return idemtest.Post(t, base+path, `"`+path+`"`, `{}`) // a key per route
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := "/" + strings.ReplaceAll(c.name, "/", "-")
			first := send(t, path)
			if first.Status != c.status || !slices.Equal(first.Header.Values("Content-Type"), c.ctype) {
				t.Fatalf("first response %d with Content-Type %q, want %d with %q", first.Status, first.Header.Values("Content-Type"), c.status, c.ctype)
			}
			replay := send(t, path)
			if !replay.Replayed() || replay.Status != c.status || replay.Body != first.Body {
				t.Fatalf("second response %d %q (replayed %v), want a replay of %d %q", replay.Status, replay.Body,
					replay.Replayed(), c.status, first.Body)
			}
			if got := replay.Header.Values("Content-Type"); !slices.Equal(got, c.ctype) {
				t.Fatalf("replayed Content-Type %q, want %q as the first response had", got, c.ctype)
			}
		})
	}
}
