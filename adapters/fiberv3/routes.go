package idemfiber

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gofiber/fiber/v3"
)

// routes tells whether a request matches a route of the app, for middleware
// registered with app.Use, which Fiber also runs for requests that match
// none (their 404 or 405 is not guarded). It is built from the app's routes
// on first use and again whenever routes were added since.
type routes struct {
	mu      sync.Mutex
	handled atomic.Uint32 // app.HandlersCount() when the table was built
	table   atomic.Pointer[routeTable]
}

type routeTable struct {
	static  map[string]map[string]bool // method -> paths of routes without parameters
	dynamic map[string][]string        // method -> patterns with parameters or wildcards
	config  fiber.Config
}

// match reports whether c's method and path match a route that is not
// middleware.
func (rs *routes) match(c fiber.Ctx) bool {
	app := c.App()
	t := rs.table.Load()
	if t == nil || rs.handled.Load() != app.HandlersCount() {
		t = rs.build(app)
	}
	path := c.Path()
	if !t.config.CaseSensitive {
		path = strings.ToLower(path)
	}
	if !t.config.StrictRouting && len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	method := c.Method()
	if t.static[method][path] {
		return true
	}
	for _, pattern := range t.dynamic[method] {
		if fiber.RoutePatternMatch(c.Path(), pattern, t.config) {
			return true
		}
	}
	return false
}

func (rs *routes) build(app *fiber.App) *routeTable {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	count := app.HandlersCount()
	if t := rs.table.Load(); t != nil && rs.handled.Load() == count {
		return t
	}
	cfg := app.Config()
	t := &routeTable{static: map[string]map[string]bool{}, dynamic: map[string][]string{}, config: cfg}
	for _, r := range app.GetRoutes(true) {
		if strings.ContainsAny(r.Path, ":*+") {
			t.dynamic[r.Method] = append(t.dynamic[r.Method], r.Path)
			continue
		}
		path := r.Path
		if !cfg.CaseSensitive {
			path = strings.ToLower(path)
		}
		if !cfg.StrictRouting && len(path) > 1 {
			path = strings.TrimSuffix(path, "/")
		}
		if t.static[r.Method] == nil {
			t.static[r.Method] = map[string]bool{}
		}
		t.static[r.Method][path] = true
	}
	rs.table.Store(t)
	rs.handled.Store(count)
	return t
}
